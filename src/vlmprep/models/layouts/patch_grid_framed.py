"""The framed patch-grid layout (HunYuanVL): an image's run also holds a separator after each merged row and its
begin and end embeddings, and its positions are the model's multimodal rope axes, one of which numbers images."""

from __future__ import annotations

from typing import Any

import torch

from . import Layout
from .patch_grid import PatchGridLayout

__all__ = ["PatchGridFramedLayout"]


class PatchGridFramedLayout(PatchGridLayout):
    """Patch grids whose image run is `h' * (w' + 1) + 2` placeholders (`h' = h / merge_size`, `w' = w / merge_size`):
    HunYuanVL's merger appends a separator to each merged row and a begin and an end embedding to the image.

    Positions are the model's own `get_rope_index`: `len(mrope_section)` axes, the last three width, height and the
    image's index. That index counts images across the whole batch upstream, so a row's logits would depend on the
    rows beside it (and its KV could not be reused alone): a batch with images in more than one row is refused.
    """

    layout = Layout(
        "patch_grid_framed",
        "flattened patches on a (t, h, w) grid per image, its run also holding row separators and begin/end tokens, multimodal rope positions with an image-index axis",
    )

    def grid_token_counts(self, grid: torch.Tensor, modality: str) -> torch.Tensor:
        """Placeholders of each image (`PatchGridLayout.grid_token_counts`): its merged rows, each with a separator,
        then its begin and end tokens."""
        merge = self.vision_config_names.merge_size_of(self.config.vision_config)
        rows, columns = grid[:, 0] * grid[:, 1] // merge, grid[:, 2] // merge
        return rows * (columns + 1) + 2

    def vision_position_ids(self, input_ids: torch.Tensor, model_kwargs: dict[str, Any]) -> torch.Tensor | None:
        """The model's multimodal rope axes alone, `(len(mrope_section), batch, seq)`, as upstream's generate passes
        them (HunYuanVL's decoder refuses a leading row of text positions).

        Args:
            input_ids (`torch.Tensor`): the whole prompt.
            model_kwargs (`dict[str, Any]`): the call's inputs (grids, mask, token types).

        Returns:
            `torch.Tensor` of shape `(len(mrope_section), batch, seq)`

        Raises:
            `ValueError`: more than one row of the batch holds images.
        """
        token_types = model_kwargs.get("mm_token_type_ids")
        is_image = input_ids == self.config.image_token_id if token_types is None else token_types == 1
        rows_with_images = int(is_image.any(-1).sum())
        if rows_with_images > 1:
            raise ValueError(
                f"{rows_with_images} rows of this batch hold images, but this model numbers images across the whole "
                "batch in its positions (`get_rope_index`), so a row's output would depend on the rows beside it. "
                "Run prompts with images one per call (text-only rows may share it)."
            )
        positions = super().vision_position_ids(input_ids, model_kwargs)
        axes = len(self.config.get_text_config().rope_parameters["mrope_section"])
        # The parent's text positions lead; without images every axis is the text position.
        return positions[1:] if positions.shape[0] == axes + 1 else positions[:1].expand(axes, -1, -1)
