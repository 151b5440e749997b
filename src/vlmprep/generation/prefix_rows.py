"""One batch row of a prefix-cache call: its token keys without padding, its items and blocks, what the store matched.

Also the small numpy helpers the prefix request reads the batch with (`vlmprep.generation.prefix`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..cache.prefix_cache import Interval, PrefixCache, PrefixMatch

__all__ = ["PrefixRow", "host_array", "leading_padding", "row_inputs"]


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

    def images_between(self, start: int, end: int) -> list[str]:
        return [digest for lo, hi, digest in self.spans if lo < end and hi > start]

    def intervals_with(self, keys: np.ndarray) -> list[Interval]:
        """The row's bidirectional blocks with the digest of what each holds (see `PrefixCache.interval_digest`)."""
        return [
            (start, end, PrefixCache.interval_digest(keys[start:end], self.images_between(start, end)))
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


def host_array(value: torch.Tensor | np.ndarray) -> np.ndarray:
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
