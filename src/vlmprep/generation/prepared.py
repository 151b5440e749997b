"""The images of one `generate` call, prepared before prefill: their spans and per-image features."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .spans import ImageSpan


@dataclass
class PreparedImages:
    """Spans of the prompt and the features of every image a prefill from `resume_point` needs.

    Features are kept once per distinct image, so expanding rows for beams or `num_return_sequences` shares them.

    Args:
        spans (`list[ImageSpan]`): all image spans of the prompt, in sequence coordinates.
        features (`dict[int, torch.Tensor]`): `(tokens, dim)` features of each needed image, by image index.
        intervals (`list[tuple[int, int]]`): merged bidirectional blocks, where no chunk may end.
        resume_point (`int`): the cache length prefill starts from.
        offset (`int`): sequence position of `input_ids[:, 0]` (non-zero when the caller passes only new tokens).
        as_list (`bool`): whether the model reads `pooler_output` as a list of tensors rather than one tensor.
    """

    spans: list[ImageSpan]
    features: dict[int, torch.Tensor]
    intervals: list[tuple[int, int]] = field(default_factory=list)
    resume_point: int = 0
    offset: int = 0
    as_list: bool = False

    def expand(self, expand_size: int) -> PreparedImages:
        """Rows repeated as `generate` repeats `input_ids` (row `r` becomes rows `r * expand_size + j`)."""
        if expand_size == 1:
            return self
        spans = [
            replace(span, row=span.row * expand_size + copy) for span in self.spans for copy in range(expand_size)
        ]
        spans.sort(key=lambda span: (span.row, span.start))
        return replace(self, spans=spans)

    def rows_between(self, start: int, end: int) -> torch.Tensor | None:
        """Feature rows of the placeholders in positions `[start, end)`, in the order the model fills them.

        Models scatter features into placeholders in row-major order over `(batch, position)`, so rows are taken
        row by row, span by span, clipped to the slice: an image cut by `start` contributes only its later rows.

        Returns:
            `torch.Tensor` of shape `(num_placeholders, dim)`, or `None` when the slice has no placeholder.
        """
        pieces = []
        for span in self.spans:
            lo, hi = max(span.start, start), min(span.end, end)
            if lo < hi:
                pieces.append(self.features[span.image_index][lo - span.start : hi - span.start])
        if not pieces:
            return None
        return torch.cat(pieces, dim=0)

    def encoder_outputs_between(self, start: int, end: int) -> dict[str, BaseModelOutputWithPooling] | None:
        """`mm_encoder_outputs` for a forward over positions `[start, end)`, in the container the model reads."""
        rows = self.rows_between(start, end)
        if rows is None:
            return None
        pooled = [rows] if self.as_list else rows.unsqueeze(0)  # (1, num_placeholders, dim)
        return {"image": BaseModelOutputWithPooling(pooler_output=pooled)}


def split_per_image(pooler_output: torch.Tensor | Sequence[torch.Tensor], token_counts: Sequence[int]) -> list:
    """Per-image `(tokens, dim)` features from a vision encoder's `pooler_output`.

    Args:
        pooler_output (`torch.Tensor` or `Sequence[torch.Tensor]`):
            `(num_images, tokens, dim)`, a list of `(tokens_i, dim)`, or `(total_tokens, dim)` flattened.
        token_counts (`Sequence[int]`): placeholder tokens of each image, to split a flattened output.

    Returns:
        `list[torch.Tensor]`: one `(tokens, dim)` tensor per image.
    """
    if isinstance(pooler_output, (list, tuple)):
        flat = [piece.reshape(-1, piece.shape[-1]) for piece in pooler_output]
        if len(flat) == len(token_counts):
            return flat
        pooler_output = torch.cat(flat, dim=0)
    if pooler_output.ndim == 3 and pooler_output.shape[0] == len(token_counts):
        return list(pooler_output)
    flat = pooler_output.reshape(-1, pooler_output.shape[-1])  # (total_tokens, dim)
    return list(torch.split(flat, list(token_counts)))
