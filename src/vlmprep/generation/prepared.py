"""The images of one `generate` call, prepared before prefill: their spans and per-image features."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .facts import CrossAttention
from .spans import ItemSpan, join_single_padding_chunks, padded_positions, plan_prefill_chunks


@dataclass
class EncoderRows(BaseModelOutputWithPooling):
    """The feature rows one forward reads for one modality, as `mm_encoder_outputs[modality]`.

    Args:
        pooler_output (`torch.Tensor` or `list[torch.Tensor]`): `(1, rows, dim)`, or `[(rows, dim)]`.
        deepstack_features (`list`, *optional*):
            per extra layer (Qwen3-VL's deepstack), the same rows in the same container; `None` when the vision
            encoder returns no such features.

    The rows are also its `last_hidden_state` (the same container), for the families whose model reads them there
    (Fuyu: its "encoder" is one linear layer, whose output is a `last_hidden_state`; `VisionFacts.features_key`).
    """

    deepstack_features: list | None = None
    # Granite Docling's forward reads its density router's logits off the image outputs; they serve only its training
    # loss (router labels, with pixels), never generation's logits.
    router_logits: torch.Tensor | None = None

    def __post_init__(self):
        if self.last_hidden_state is None:
            self.last_hidden_state = self.pooler_output
        super().__post_init__()


@dataclass
class PreparedItems:
    """Spans of the prompt and the features of every image a prefill from `resume_point` needs.

    Features are kept once per distinct image, so expanding rows for beams or `num_return_sequences` shares them.
    Items of every modality (images, videos) live here together, keyed by their `item_index`.

    Args:
        spans (`list[ItemSpan]`): all spans of the prompt, every modality, in sequence coordinates.
        features (`dict[int, torch.Tensor]`): `(tokens, dim)` features of each needed item, by image index.
        intervals (`list[tuple[int, int]]`): merged bidirectional blocks, where no chunk may end.
        resume_point (`int`): the cache length prefill starts from.
        offset (`int`): sequence position of `input_ids[:, 0]` (non-zero when the caller passes only new tokens).
        as_list (`bool` or `dict[str, bool]`):
            whether the model reads `pooler_output` as a list of tensors rather than one tensor (per modality).
        deepstack (`dict[int, tuple[torch.Tensor, ...]]`):
            per needed item whose encoder returns per-layer extra features (Qwen3-VL's deepstack), one
            `(tokens, dim)` tensor per layer; fed to the same placeholders as `features`.
        item_independent (`dict[str, dict]`, *optional*):
            per modality of the prompt's items, the encoder-output fields that depend on no item
            (`FamilyHooks.item_independent_encoder_fields`): every forward over the prompt feeds that modality with them.
        deepstack_targets (`tuple[int, ...]`, *optional*):
            the decoder layer of each deepstack entry when the model reads them as `(layer, features)` pairs
            (`VisionFacts.deepstack_targets`); `None`: one entry per layer, in layer order.
        per_item_list (`bool`, *optional*, defaults to `False`):
            whether `pooler_output` is a list of one tensor per run in a forward's slice (`VisionFacts.features_per_item`)
            rather than in the `as_list` container.
        cross_attention (`CrossAttention`, *optional*):
            how the model reads the features as cross-attention states (`VisionFacts.cross_attention`) rather than at
            the placeholders: the first forward from `resume_point` gets them all at once, or every forward gets the
            whole plan (`CrossAttention.every_forward`, whose forwards also carry its placeholders' rows).
    """

    spans: list[ItemSpan]
    features: dict[int, torch.Tensor]
    intervals: list[tuple[int, int]] = field(default_factory=list)
    resume_point: int = 0
    offset: int = 0
    as_list: bool | dict[str, bool] = False
    deepstack: dict[int, tuple[torch.Tensor, ...]] = field(default_factory=dict)
    deepstack_targets: tuple[int, ...] | None = None
    item_independent: dict[str, dict] = field(default_factory=dict)
    per_item_list: bool = False
    cross_attention: CrossAttention | None = None

    def expand(self, expand_size: int) -> PreparedItems:
        """Rows repeated as `generate` repeats `input_ids` (row `r` becomes rows `r * expand_size + j`)."""
        if expand_size == 1:
            return self
        spans = [
            replace(span, row=span.row * expand_size + copy) for span in self.spans for copy in range(expand_size)
        ]
        spans.sort(key=lambda span: (span.row, span.start))
        return replace(self, spans=spans)

    def rows_between(
        self, start: int, end: int, modality: str = "image", layer: int | None = None
    ) -> torch.Tensor | None:
        """Feature rows of the placeholders in positions `[start, end)`, in the order the model fills them.

        Models scatter features into placeholders in row-major order over `(batch, position)`, so rows are taken
        row by row, span by span, clipped to the slice: an image cut by `start` contributes only its later rows.

        Args:
            start (`int`): first position of the slice.
            end (`int`): one past its last position.
            modality (`str`, *optional*, defaults to `"image"`): whose placeholders.
            layer (`int`, *optional*): a deepstack layer's rows instead of the features.

        Returns:
            `torch.Tensor` of shape `(num_placeholders, dim)`, or `None` when the slice has no placeholder.
        """
        pieces = self._row_pieces(start, end, modality, layer)
        if not pieces:
            return None
        return torch.cat(pieces, dim=0)

    def _row_pieces(self, start: int, end: int, modality: str, layer: int | None = None) -> list[torch.Tensor]:
        # The rows of each span (or part of one) inside `[start, end)`, span by span in the model's fill order
        pieces = []
        for span in self.spans:
            lo, hi = max(span.start, start), min(span.end, end)
            if span.modality == modality and lo < hi:
                item = self.features[span.item_index] if layer is None else self.deepstack[span.item_index][layer]
                first = span.feature_start + lo - span.start  # the item's row of the placeholder at `lo`
                pieces.append(item[first : first + hi - lo])
        return pieces

    def encoder_outputs_between(self, start: int, end: int) -> dict[str, EncoderRows] | None:
        """`mm_encoder_outputs` for a forward over positions `[start, end)`, in the container the model reads."""
        if self.cross_attention is not None and not self.cross_attention.every_forward:
            # Cross-attention layers append the states to their cache: the first forward gets every needed item's
            states = self.cross_attention_states() if start == self.resume_point else None
            return None if states is None else {"image": EncoderRows(pooler_output=states)}
        outputs = {}
        for modality in dict.fromkeys(span.modality for span in self.spans):
            rows = self.rows_between(start, end, modality)
            fields = self.item_independent.get(modality) or {}
            if rows is None and not fields:
                continue
            if rows is None:  # no placeholder in the slice, but the model reads the fields (Ovis2's indicators)
                width = next(iter(self.features.values())).shape[-1] if self.features else _width(fields)
                rows = torch.zeros(0, width)
            if self.per_item_list:  # one tensor per run in the slice (Ovis2.5 counts the items it is fed)
                output = EncoderRows(pooler_output=self._row_pieces(start, end, modality))
            else:
                output = EncoderRows(pooler_output=self._container(rows, modality))
            for name, value in fields.items():
                setattr(output, name, value)
            items = [span.item_index for span in self.spans if span.modality == modality]
            layers = next((len(self.deepstack[item]) for item in items if item in self.deepstack), None)
            if layers is not None:
                per_layer = [
                    self._container(self.rows_between(start, end, modality, layer), modality)
                    for layer in range(layers)
                ]
                output.deepstack_features = deepstack_container(per_layer, self.deepstack_targets)
            outputs[modality] = output
        return outputs or None

    def cross_attention_states(self) -> torch.Tensor | None:
        """The needed items' features as cross-attention states: each row's items concatenated in prompt order.

        Returns:
            `torch.Tensor` of shape `(rows, positions, dim)`, or `None` when no item is needed.
        """
        per_row: dict[int, list[torch.Tensor]] = {}
        for span in self.spans:  # sorted by (row, start)
            if span.item_index in self.features:
                per_row.setdefault(span.row, []).append(self.features[span.item_index])
        if not per_row:
            return None
        rows = [torch.cat(per_row.get(row, []), dim=0) for row in range(max(per_row) + 1)]
        if len({row.shape[0] for row in rows}) != 1:
            raise ValueError(
                "The rows of this batch have different numbers of images after the cache. A cross-attention model "
                "attends to every image of its row, including the padding image slots the processor adds, whose "
                "states vlmprep does not compute: pass one row per call, or the same number of images in every row."
            )
        return torch.stack(rows)  # (rows, items * positions, dim)

    def _container(self, rows: torch.Tensor, modality: str) -> torch.Tensor | list[torch.Tensor]:
        as_list = self.as_list.get(modality, False) if isinstance(self.as_list, dict) else self.as_list
        return [rows] if as_list else rows.unsqueeze(0)  # (1, num_placeholders, dim)


class PlannedEncoderOutputs(dict):
    """`mm_encoder_outputs` in the form transformers' generation carries them, plus the plan they come from.

    As a dict (modality -> `EncoderRows`) it holds the feature rows of every placeholder from the resume point to the
    end of the prompt, in the order the model fills them: exactly what upstream feeds the first forward over the
    rest of the prompt (`_prefill`, the first forward of assisted decoding, every forward without a cache). vlmprep's
    own `_prefill` reads `prepared` instead, to feed each planned chunk its rows; an assistant model that is a
    vlmprep drop-in reads the per-item features from it rather than encoding again.

    Args:
        prepared (`PreparedItems`): the call's spans and per-item features.
        end (`int`): one past the last position of the prompt.
        item_extras (`dict`, *optional*):
            the per-item inputs besides pixels that input preparation took out of the kwargs (grids, image sizes), for
            an assistant model that needs them for its positions.
        prefix_request (`PrefixRequest`, *optional*):
            the call's prefix-cache request, which keeps a hybrid decoder's states after each prefill forward.

    `per_call` holds what a family computes from the items once per call and reads at every forward (the states its
    cross-attention projects): it lives and dies with the call, never on the model.
    """

    def __init__(self, prepared: PreparedItems, end: int, item_extras: dict | None = None, prefix_request=None):
        super().__init__(prepared.encoder_outputs_between(prepared.resume_point, end) or {})
        self.prepared = prepared
        self.end = end
        self.item_extras = item_extras or {}
        self.prefix_request = prefix_request
        self.per_call: dict = {}

    def plan_chunks(self, start: int, chunk_size: int | None, cache, attention_mask=None) -> list[tuple[int, int]]:
        """The prefill chunks from `start` (`plan_prefill_chunks`), also cut where the prefix request snapshots a
        hybrid decoder's states; a one-token chunk at a padded position joins the next (`join_single_padding_chunks`:
        a recurrent layer would take its pad token into its state)."""
        chunks = plan_prefill_chunks(start, self.end, chunk_size, self.prepared.intervals)
        if self.prefix_request is not None:
            chunks = self.prefix_request.chunks_with_snapshot_points(chunks, self.prepared, cache)
        return join_single_padding_chunks(chunks, padded_positions(attention_mask, self.end))

    def outputs_between(self, start: int, end: int) -> dict | None:
        """`mm_encoder_outputs` of a prefill forward over positions `[start, end)`: the rows of its placeholders, or
        the whole plan where every forward reads every item (`CrossAttention.every_forward`)."""
        cross_attention = self.prepared.cross_attention
        if cross_attention is not None and cross_attention.every_forward:
            return self
        return self.prepared.encoder_outputs_between(start, end)

    def after_prefill_forward(self, cache, position: int) -> None:
        """Hands the prefix request the cache after a prefill forward ending at `position` (a snapshot point)."""
        if self.prefix_request is not None:
            self.prefix_request.capture(cache, position)

    def to(self, *args, **kwargs) -> PlannedEncoderOutputs:
        """Itself: the model moves the rows to its embeddings' device and dtype where it scatters them.

        accelerate's device hooks (`device_map`) move a forward's arguments with `.to` when they have one, and would
        otherwise rebuild a mapping as `type(mapping)(items)`, losing the plan.
        """
        return self

    def expand(self, expand_size: int) -> PlannedEncoderOutputs:
        """The same outputs for rows repeated as `generate` repeats `input_ids` (beams, `num_return_sequences`)."""
        if expand_size == 1:
            return self
        return PlannedEncoderOutputs(self.prepared.expand(expand_size), self.end, self.item_extras)


def containers_of(model, spans: list[ItemSpan]) -> dict:
    """The `PreparedItems` arguments that say how a family's model reads its encoder outputs: `as_list`,
    `deepstack_targets`, `per_item_list`, `cross_attention` and `item_independent` (for the modalities of `spans`).

    Args:
        model: the drop-in model (its `vision_facts`, config and `item_independent_encoder_fields`).
        spans (`list[ItemSpan]`): the prompt's spans.

    Returns:
        `dict`
    """
    facts = model.vision_facts
    modalities = dict.fromkeys(span.modality for span in spans)
    return {
        "as_list": facts.features_as_list_by_modality(),
        "deepstack_targets": facts.deepstack_targets_of(model.config),
        "per_item_list": facts.features_per_item,
        "cross_attention": facts.cross_attention,
        "item_independent": {
            modality: fields for modality in modalities if (fields := model.item_independent_encoder_fields(modality))
        },
    }


def _width(fields: dict) -> int:
    # The feature width, read off an item-independent field (a tensor of rows) when no item was encoded
    return next(value.shape[-1] for value in fields.values() if isinstance(value, torch.Tensor))


def deepstack_container(per_layer: list, targets: tuple[int, ...] | None) -> list:
    """A forward's deepstack rows in the container the model reads: one entry per layer (Qwen3-VL), or
    `(decoder layer, rows)` pairs when the family states the entries' layers (Granite 4 Vision).

    Args:
        per_layer (`list`): each entry's rows, in the order the encoder returned the entries.
        targets (`tuple[int, ...]`, *optional*): the decoder layer of each entry (`VisionFacts.deepstack_targets`).

    Returns:
        `list`
    """
    if targets is None:
        return per_layer
    if len(targets) != len(per_layer):
        raise ValueError(
            f"The vision encoder returned {len(per_layer)} deepstack entries but the config targets {len(targets)} "
            "decoder layers; the features were made by a model with another config."
        )
    return list(zip(targets, per_layer, strict=True))


def split_per_item(pooler_output: torch.Tensor | Sequence[torch.Tensor], token_counts: Sequence[int]) -> list:
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
