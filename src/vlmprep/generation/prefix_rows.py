"""The rows of a prefix request: each row's token keys, its blocks' digests and how much of a match it can use.

Every input is read as numpy (`host`): a lookup costs mostly per-operation overhead, and a numpy operation costs a
fraction of a torch one (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..cache.identity import cache_identity, salt_namespace
from ..cache.prefix_cache import Interval, PrefixCache, PrefixMatch
from .cross_attention_keys import mask_signatures
from .facts import TOKEN_TYPE_KEYS

# Per-token inputs besides the ids that change a token's KV (the mask of bidirectional families, multimodal rope).
KV_INPUT_KEYS = (*TOKEN_TYPE_KEYS, "position_ids")
# Positions when the call has no `position_ids`: the model then uses absolute (padded) cache positions.
ABSOLUTE_POSITIONS = "absolute_positions"


class PrefixRow:
    """One batch row: its token keys without padding, its images and blocks, and what the store matched."""

    def __init__(self, row: int, pad: int, spans: list, blocks: list, storable: bool):
        self.row, self.pad, self.spans = row, pad, spans
        self.blocks = [(start, end) for start, end in blocks if end - start > 1 and start >= 0]
        self.storable = storable  # False for rows whose mask has holes: neither looked up nor stored
        self.keys = np.zeros((0, 1), dtype=np.int64)
        self.intervals: list[Interval] = []
        self.match = PrefixMatch()
        self.hit = 0

    def set_keys(self, keys: np.ndarray) -> None:
        """The row's token keys (`key_material_array` with the row's images), and its blocks' digests from them."""
        self.keys = keys
        self.intervals = self.intervals_with(keys)

    def items_between(self, start: int, end: int) -> list[str]:
        return [digest for lo, hi, digest in self.spans if lo < end and hi > start]

    def intervals_with(self, keys: np.ndarray) -> list[Interval]:
        """The row's bidirectional blocks with the digest of what each holds (see `PrefixCache.interval_digest`)."""
        return [
            (start, end, PrefixCache.interval_digest(keys[start:end], self.items_between(start, end)))
            for start, end in self.blocks
        ]

    def usable_hit(self) -> int:
        """The matched length, capped so the last prompt token is computed, and exact with respect to blocks.

        KV before a resume point is exact when the stored row had the very same bidirectional blocks before it
        (same positions, same key material, same images), including those that go on after it: then every stored
        token saw what the new prompt shows it. Otherwise the hit moves back to the first block that differs.
        """
        hit = min(self.match.tokens, len(self.keys) - 1)
        stored, own = set(self.match.open_intervals), set(self.intervals)
        while hit > 0:
            differing = {interval for interval in stored ^ own if interval[0] < hit}
            if not differing:
                return hit
            hit = min(start for start, _, _ in differing)
        return 0


def call_namespace(model, salt: str | None, spans: list) -> tuple[str, ...]:
    """The namespace of a call's prefix keys: the model's identity, the salt, and the modalities whose
    item-independent encoder fields every forward gets (Ovis2's indicator embeddings,
    `FamilyHooks.item_independent_encoder_fields`): those tokens' KV differs with and without items, so calls with
    them key their prefixes apart from calls without."""
    fed = sorted({span.modality for span in spans if model.item_independent_encoder_fields(span.modality)})
    return (*cache_identity(model, part="model"), salt_namespace(salt), *fed)


def items_of_leading_blocks(model, plan) -> tuple[str, ...]:
    """The content hashes of the items inside blocks fed whole from a row's start, for the keys' namespace.

    Args:
        model: the drop-in (its `whole_item_blocks`).
        plan (`PromptPlan`): the call's spans and item hashes.

    Returns:
        `tuple[str, ...]`: empty when no such block holds an item.
    """
    # Items of blocks fed whole from a row's start (Llama 3.2 Vision's text before its first image attends to every
    # image): the row's first tokens' KV depends on them. Keyed apart, a call with other items stores rows of its own
    # rather than branching off a shared start whose KV saw other items (never reused: `PrefixRow.usable_hit`).
    starts = {block.row for block in model.whole_item_blocks(plan.spans) if block.start == 0}
    hashes = [plan.item_hashes.get(span.item_index, "") for span in plan.spans if span.row in starts]
    return ("leading-block-items", *hashes) if hashes else ()


def per_token_inputs(
    model_kwargs: dict[str, Any], input_ids: torch.Tensor, mask_axes: dict[str, int] | None = None
) -> dict[str, torch.Tensor | np.ndarray]:
    """The call's inputs that change a token's KV, as the model takes them (extended by its own rule while decoding).

    Args:
        model_kwargs (`dict[str, Any]`): the call's inputs.
        input_ids (`torch.Tensor` of shape `(batch_size, seq_len)`): the prompt.
        mask_axes (`dict[str, int]`, *optional*): a cross-attention mask's name -> its sequence axis.

    Returns:
        `dict[str, torch.Tensor | np.ndarray]`
    """
    width = input_ids.shape[-1]
    axes = {**dict.fromkeys(KV_INPUT_KEYS, -1), **(mask_axes or {})}
    inputs: dict[str, torch.Tensor | np.ndarray] = {
        key: model_kwargs[key]
        for key, axis in axes.items()
        if isinstance(model_kwargs.get(key), torch.Tensor) and model_kwargs[key].shape[axis] == width
    }
    if "position_ids" not in inputs:
        inputs[ABSOLUTE_POSITIONS] = np.arange(width)[None]
    return inputs


def key_inputs(per_token: dict, mask_axes: dict[str, int]) -> dict[str, np.ndarray]:
    """The per-token inputs as key material reads them, on the host, each `(..., batch, seq)`: a cross-attention
    mask becomes one signature per token (`cross_attention_keys.mask_signatures`)."""
    return {
        key: mask_signatures(value, mask_axes[key]) if key in mask_axes else host(value)
        for key, value in per_token.items()
    }


def host(value: torch.Tensor | np.ndarray) -> np.ndarray:
    """A numpy view of a tensor (copied to the host first when it lives on an accelerator)."""
    if isinstance(value, np.ndarray):
        return value
    try:
        return value.numpy()  # a CPU tensor without grad: a view, one call
    except (RuntimeError, TypeError):  # an accelerator's tensor, or one that requires grad
        return value.numpy(force=True)


def row_inputs(per_token: dict[str, np.ndarray], row: int, start: int, end: int) -> dict[str, np.ndarray]:
    # Per-token inputs are `(batch, seq)` or `(..., batch, seq)` (M-RoPE rows); a batch dimension of 1 is shared.
    def select(value: np.ndarray) -> np.ndarray:
        value = value if value.ndim > 1 else value[None]
        return value[..., row if value.shape[-2] > 1 else 0, start:end]

    return {key: select(value) for key, value in per_token.items()}


def leading_padding(mask: np.ndarray | None, width: int) -> tuple[int, bool]:
    """Left-padding length of a row, and whether the rest of the row is unmasked (no hole the keys cannot see)."""
    if mask is None:
        return 0, True
    pad = int(mask.argmax())  # the first attended position, or 0 when none is
    if not mask[pad]:
        return width, False
    return pad, bool(mask[pad:].all())
