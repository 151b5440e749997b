"""One `generate` call's use of a `PrefixCache`: restore the longest stored prefix, then store the finished rows."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from ..cache.prefix_cache import PrefixCache, PrefixMatch
from .spans import Block, ImageSpan, resolve_resume_point

_RESTORABLE_LAYERS = (DynamicLayer, DynamicSlidingWindowLayer)


class PrefixRequest:
    """Carries one call's prefix-cache state from input preparation to the end of `generate`.

    Args:
        store (`PrefixCache`): the store to read from and write to.
    """

    def __init__(self, store: PrefixCache):
        self.store = store
        self.cache: DynamicCache | None = None
        self.root: bytes | None = None
        self.rows: list[_Row] = []

    @staticmethod
    def applies(generation_config, batch_size: int) -> bool:
        """Beams and multiple return sequences reorder or repeat cache rows after input preparation: not stored."""
        return (
            generation_config.use_cache
            and generation_config.num_beams == 1
            and generation_config.num_return_sequences == 1
            and batch_size >= 1
        )

    def restore(
        self,
        model,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        spans: Sequence[ImageSpan],
        image_hashes: dict[int, str],
        blocks: Sequence[Block],
        intervals: Sequence[tuple[int, int]],
        placeholder_id: int,
        namespace: Sequence[str],
    ) -> tuple[DynamicCache, int, bool]:
        """A fresh cache holding the longest stored prefix shared by every row.

        Returns:
            `tuple[DynamicCache, int, bool]`: the cache, the tokens it holds, and whether that resume point may stay
            inside a bidirectional block (batch of one, and the stored KV saw that very block whole).
        """
        self.root = self.store.root_key(namespace)
        batch_size, width = input_ids.shape
        cache = DynamicCache(config=model.config)
        cache.activate_past_recording()  # sliding-window layers keep every state, so the whole row can be stored
        self.cache = cache
        if not all(isinstance(layer, _RESTORABLE_LAYERS) for layer in cache.layers):
            return cache, 0, False

        ends = []
        for row in range(batch_size):
            pad = int((attention_mask[row] == 0).sum()) if attention_mask is not None else 0
            tokens = input_ids[row, pad:].tolist()
            row_spans = [span for span in spans if span.row == row]
            row_blocks = [(b.start - pad, b.end - pad) for b in blocks if b.row == row]
            record = _Row(row, pad, tokens, row_spans, image_hashes, row_blocks)
            match = self.store.match(self.root, tokens, record.images_between)
            record.match = match
            record.hit = record.usable_hit(placeholder_id)
            self.rows.append(record)
            ends.append(pad + record.hit)

        resume = min(ends)
        trusted = batch_size == 1 and resume > 0
        if not trusted:
            resume = resolve_resume_point(resume, intervals)
        if resume > 0:
            for layer_index in range(len(cache.layers)):
                keys = values = None
                for record in self.rows:
                    length = resume - record.pad
                    if length <= 0:
                        continue
                    row_keys, row_values = record.match.layer_kv(layer_index, length)  # (heads, length, head_dim)
                    if keys is None:
                        shape = (batch_size, row_keys.shape[0], resume, row_keys.shape[-1])
                        keys = row_keys.new_zeros(shape)  # padding slots are masked out: any value is exact
                        values = row_values.new_zeros(shape)
                    keys[record.row, :, record.pad : resume] = row_keys
                    values[record.row, :, record.pad : resume] = row_values
                cache.update(keys, values, layer_index)
        for record in self.rows:
            reused = max(0, resume - record.pad)
            self.store.record_use(reused, len(record.tokens) - reused)
        return cache, resume, trusted

    def finish(self, sequences: torch.Tensor) -> None:
        """Store every row's prompt and generated tokens whose KV the cache now holds."""
        if self.cache is None or self.root is None:
            return
        length = self.cache.get_seq_length()
        layers = self.cache.layers
        if not all(isinstance(getattr(layer, "keys", None), torch.Tensor) for layer in layers):
            return
        if any(layer.keys.shape[-2] != length for layer in layers):
            return  # a layer dropped states (no past recording): storing would be wrong
        for record in self.rows:
            tokens = sequences[record.row, record.pad : length].tolist()

            def block_kv(start: int, end: int, record=record) -> list:
                lo, hi = record.pad + start, record.pad + end
                return [(layer.keys[record.row, :, lo:hi], layer.values[record.row, :, lo:hi]) for layer in layers]

            self.store.insert(self.root, tokens, record.images_between, block_kv, record.blocks)


class _Row:
    """One batch row: its tokens without padding, its images, and what the store matched."""

    def __init__(self, row, pad, tokens, spans, image_hashes, blocks):
        self.row, self.pad, self.tokens = row, pad, tokens
        self.spans = [(span.start - pad, span.end - pad, image_hashes[span.image_index]) for span in spans]
        self.blocks = blocks
        self.match = PrefixMatch()
        self.hit = 0

    def images_between(self, start: int, end: int) -> list[str]:
        return [digest for lo, hi, digest in self.spans if lo < end and hi > start]

    def usable_hit(self, placeholder_id: int) -> int:
        """The matched length, capped so the last prompt token is computed, and safe with respect to blocks.

        A hit inside a bidirectional block is kept only when the stored row had the very same block and the rest of
        the block is image placeholders (whose content the keys include): then the stored KV saw the block whole.
        """
        hit = min(self.match.tokens, len(self.tokens) - 1)
        for start, end in self.blocks:
            if start < hit < end:
                same_block = (start, end) in self.match.open_intervals
                rest_is_image = all(token == placeholder_id for token in self.tokens[hit:end])
                return hit if same_block and rest_is_image else start
        return max(hit, 0)
