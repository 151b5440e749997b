"""One `generate` call's use of a `PrefixCache`: restore the longest stored prefix, then store the finished rows.

The restored prefix becomes the call's cache, of the kind the call asks for (`cache_implementation`):

- `None`, `"dynamic"`, `"offloaded"`: a `DynamicCache` (offloaded for `"offloaded"`), recording every state of its
  sliding-window layers, so whole rows are stored afterwards; the cache `generate` returns no longer records, and its
  sliding-window layers hold their window only, as transformers' own (`vlmprep.cache.recording.stop_recording`).
- `"static"`, `"offloaded_static"` and the deprecated static kinds (`"sliding_window"`, `"hybrid"`, ...): a
  `StaticCache` sized as transformers sizes it. Rows are stored only while every layer still holds every state (a
  sliding-window layer keeps only its window): otherwise the call restores but stores nothing.
- `"quantized"`: the prefix cache is not used (a quantized cache keeps no exact KV to store, and a restored prefix
  would be attended to quantized where transformers attends to it exact); a warning is logged once.

A hybrid decoder (convolution or Gated DeltaNet layers) uses a dynamic cache only, and resumes only where the store
holds a snapshot of every recurrent layer's state (`vlmprep.cache.recurrent_state`, docs/prefix_cache.md).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers.cache_utils import Cache, DynamicLayer
from transformers.generation.configuration_utils import ALL_STATIC_CACHE_IMPLEMENTATIONS

from ..cache.identity import any_module_training
from ..cache.layer_extras import UnsupportedCacheLayer, extended_layer_classes, restore_layer_extras
from ..cache.prefix_cache import PrefixCache, key_material_array, key_material_layout
from ..cache.recording import stop_recording
from ..cache.recurrent_state import recurrent_layer_indices, restore_snapshot
from ..utils.logging import get_logger
from .assisted import is_assisted
from .cross_attention_keys import sees_items_ahead
from .prefix_layers import layer_refusal, new_call_cache, stored_layer_states
from .prefix_rows import (
    ABSOLUTE_POSITIONS,
    PrefixRow,
    call_namespace,
    host,
    items_of_leading_blocks,
    key_inputs,
    leading_padding,
    per_token_inputs,
    row_inputs,
)
from .prefix_snapshots import SnapshotPoints
from .spans import resolve_resume_point

if TYPE_CHECKING:
    from .plan import PromptPlan

logger = get_logger(__name__)

_DYNAMIC_KINDS = (None, "dynamic", "offloaded")


class PrefixRequest:
    """Carries one call's prefix-cache state from input preparation to the end of `generate`.

    Args:
        store (`PrefixCache`): the store to read from and write to.
        assisted (`bool`, *optional*, defaults to `False`): whether the call was given an `assistant_model`.
    """

    def __init__(self, store: PrefixCache, assisted: bool = False):
        self.store = store
        self.assisted = assisted
        self.lookup = True  # False: the prompt is prefilled whole, and only stored afterwards (`store_only_reason`)
        self.cache: Cache | None = None
        self.root: bytes | None = None
        self.rows: list[PrefixRow] = []
        self.prompt_length = 0
        self.per_token: dict[str, torch.Tensor] = {}  # the prompt's per-token inputs, whole batch
        self.mask_axes: dict[str, int] = {}  # a cross-attention mask's sequence axis (`cross_attention_keys`)
        self.update_model_kwargs = None  # the model's own rule extending them by one generated token
        self.adopted: list[tuple[DynamicLayer, torch.Tensor]] = []  # layers holding views of stored KV (`_adopt`)
        self.recurrent = False  # a hybrid decoder: resumes only where a snapshot of its recurrent states is stored
        self.padding_sensitive = False  # a padded row's KV is not the unpadded row's: padded rows are not stored
        self.snapshots: SnapshotPoints | None = None  # a hybrid decoder's states where a later request may part
        self.layer_count = 0  # the call's cache layers before any forward
        self.item_layers: tuple[int, ...] = ()  # layers caching item states: stored empty (`item_state_layers`)

    def chunks_with_snapshot_points(self, chunks: list, prepared, cache: Cache) -> list[tuple[int, int]]:
        """A hybrid decoder's prefill chunks also cut where its states are snapshotted (`SnapshotPoints.chunks`);
        other calls' chunks are returned as they are."""
        if self.snapshots is None or not self.lookup or cache is not self.cache:
            return chunks  # (a call that is not looked up returns what each forward computed: one forward, as asked)
        return self.snapshots.chunks(chunks, prepared)

    def capture(self, cache: Cache, position: int) -> None:
        """Keep the recurrent states a prefill forward ending at `position` left (a snapshot point, stored later)."""
        if self.snapshots is not None and cache is self.cache:
            self.snapshots.after_prefill_forward(position)

    @staticmethod
    def applies(model, generation_config, batch_size: int) -> bool:
        """Whether this call uses the store.

        Beams and multiple return sequences reorder or repeat cache rows after input preparation; in train mode the
        KV depends on dropout; a quantized cache holds no exact KV: none of these are looked up or stored.
        """
        if generation_config.cache_implementation not in (*_DYNAMIC_KINDS, *ALL_STATIC_CACHE_IMPLEMENTATIONS):
            logger.warning_once(
                f"The prefix cache is not used with `cache_implementation={generation_config.cache_implementation!r}`"
                ": that cache keeps no exact KV to store or restore. Use a dynamic or static cache to reuse prefixes."
            )
            return False
        call_refusals = (
            (not generation_config.use_cache, "`use_cache=False` (no KV is kept to store)"),
            (generation_config.num_beams > 1, "beam search (beams reorder the cache rows)"),
            (generation_config.num_return_sequences > 1, "`num_return_sequences > 1` (the cache rows are repeated)"),
            (any_module_training(model), "the model in train mode (dropout changes the KV)"),
        )
        reason = layer_refusal(model, generation_config.cache_implementation)
        reason = reason or next((why for refused, why in call_refusals if refused), None)
        if reason is not None:
            logger.warning_once(f"The prefix cache is not used with {reason}; this call prefills the whole prompt.")
        return reason is None and batch_size >= 1

    def store_only_reason(self, generation_config) -> str | None:
        """Why this call prefills its whole prompt (no lookup) and only stores it afterwards, or `None`.

        transformers returns hidden states and attentions of every prompt token (the store keeps only KV), and
        assisted decoding's first forward feeds the whole prompt on top of the cache (`vlmprep.generation.assisted`).
        """
        returned = generation_config.output_hidden_states or generation_config.output_attentions
        if returned and generation_config.return_dict_in_generate:
            return "`output_hidden_states` or `output_attentions` (they cover every prompt token)"
        if is_assisted(generation_config, self.assisted):
            return "assisted decoding (its first forward feeds the whole prompt)"
        return None

    def restore(
        self,
        model,
        input_ids: torch.Tensor,
        model_kwargs: dict[str, Any],
        plan: PromptPlan,
        salt: str | None,
        generation_config,
    ) -> tuple[Cache, int]:
        """A fresh cache of the kind the call asks for, holding the longest stored prefix shared by every row.

        Args:
            model: the model generating.
            input_ids (`torch.Tensor` of shape `(batch_size, seq_len)`): the whole prompt (no cache was passed).
            model_kwargs (`dict[str, Any]`):
                the call's inputs after token types and positions were prepared (`attention_mask`, token types,
                `position_ids` are read).
            plan (`PromptPlan`): the prompt's spans, blocks and the content hash of every item.
            salt (`str`, *optional*): the call's cache salt (with the model's identity, the keys' namespace).
            generation_config: the call's generation config; its `cache_implementation` is consumed here, as the
                restored cache becomes the call's cache.

        Returns:
            `tuple[Cache, int]`: the cache, and the point prefill resumes from: the tokens it holds, never strictly
            inside a bidirectional block unless the stored KV saw the very same blocks (batch of one).
        """
        namespace = (*call_namespace(model, salt, plan.spans), *items_of_leading_blocks(model, plan))
        self._start(model, input_ids, model_kwargs, namespace, generation_config)
        ends = self._match_rows(input_ids, model_kwargs.get("attention_mask"), plan)
        resume = self._resume_point(ends, plan.intervals)
        if resume > 0 and len(self.rows) == 1 and self.rows[0].pad == 0:
            self._load_unpadded_row(resume, input_ids.device)
        elif resume > 0:
            self._load_rows(resume, input_ids.device)
        for record in self.rows:
            reused = max(0, resume - record.pad)
            shared = min(record.match.tokens, len(record.keys) - 1)  # what the store holds (the last token is fed)
            self.store.record_use(reused, len(record.keys) - reused, max(shared, reused))
        return self.cache, resume

    def _start(self, model, input_ids: torch.Tensor, model_kwargs: dict[str, Any], namespace, generation_config):
        # The per-token inputs and the keys' root, whether the store is looked up, and the call's fresh cache.
        cross_attention = model.vision_facts.cross_attention
        self.mask_axes = dict([cross_attention.mask]) if cross_attention and cross_attention.mask else {}
        self.per_token = per_token_inputs(model_kwargs, input_ids, self.mask_axes)
        self.prompt_length = input_ids.shape[1]
        self.update_model_kwargs = model._update_model_kwargs_for_generation
        self.root = _root_key((*namespace, *key_material_layout(key_inputs(self.per_token, self.mask_axes))))
        store_only = self.store_only_reason(generation_config)
        if store_only is not None:
            self.lookup = False
            logger.warning_once(
                f"The prefix cache is not looked up with {store_only}: this call prefills the whole prompt, and "
                "stores its prompt and answer for later calls (under the same attention implementation)."
            )
        self.cache = new_call_cache(model, generation_config, input_ids.shape[0], input_ids.shape[1], model_kwargs)
        self.recurrent = bool(recurrent_layer_indices(self.cache))
        if self.recurrent:
            self.snapshots = SnapshotPoints(self.cache, self.prompt_length, *self.store.snapshot_policy)
            if not is_assisted(generation_config, self.assisted):  # (refused with recurrent states: crops them)
                self.snapshots.watch(model)  # the prompt's end and the answer's states, after each forward
        self.padding_sensitive = (
            self.recurrent or bool(extended_layer_classes(self.cache)) or model.padding_changes_cached_kv()
        )
        self.layer_count = len(self.cache.layers)
        self.item_layers = tuple(model.item_state_layers())

    def _match_rows(self, input_ids: torch.Tensor, attention_mask, plan: PromptPlan) -> list[int]:
        """Every row's token keys and its usable match in the store; returns each row's reusable end (padded)."""
        spans, item_hashes, blocks = plan.spans, plan.item_hashes, plan.blocks
        batch_size, width = input_ids.shape
        # The batch's ids, masks and per-token inputs are read once, as numpy (see `prefix_rows`: cheaper per op).
        ids, per_token = host(input_ids), key_inputs(self.per_token, self.mask_axes)
        masks = host(attention_mask) if attention_mask is not None else None
        ends = []
        for row in range(batch_size):
            pad, exact = leading_padding(masks[row] if masks is not None else None, width)
            # A recurrent state runs through padding (its updates are not masked the way attention is), an indexer
            # may pick keys by cache slot (MiniMax M3's blocks), and a decoder may scale queries by cache place
            # (Llama 4's NoPE layers, `FamilyHooks.padding_changes_cached_kv`): such a padded row is neither looked up nor
            # stored, as its KV is not the unpadded row's
            exact = exact and not (self.padding_sensitive and pad > 0)
            starts = [s.start for s in spans if s.row == row]  # a token seeing a later item: its key cannot say so
            exact = exact and not sees_items_ahead(self.per_token, self.mask_axes, row, starts)
            row_spans = [(s.start - pad, s.end - pad, item_hashes[s.item_index]) for s in spans if s.row == row]
            row_blocks = [(b.start - pad, b.end - pad) for b in blocks if b.row == row]
            record = PrefixRow(row, pad, row_spans, row_blocks, storable=exact)
            # Token keys (material and image columns) built in one array
            record.set_keys(
                key_material_array(ids[row, pad:], row_inputs(per_token, row, pad, width), record.items_between)
            )
            if exact and self.lookup:
                record.match = self.store.match_keys(self.root, record.keys)
                record.hit = record.usable_hit()
            self.rows.append(record)
            # A row with nothing to reuse allows a resume point up to its padding (padding KV is never attended to),
            # except a fully padded row, whose last (padding) position's logits are returned: computed, not restored.
            ends.append(pad + record.hit if pad < width else 0)
        return ends

    def _resume_point(self, ends: list[int], intervals) -> int:
        # Where every row can resume, never strictly inside a block unless one row's stored KV saw the same blocks.
        resume = min(ends)
        if len(self.rows) > 1 or resume == 0:  # a batch of one resumes where its stored KV is exact, blocks or not
            resume = resolve_resume_point(resume, intervals)
        if all(resume <= record.pad for record in self.rows):
            resume = 0  # only padding before the resume point: nothing to restore
        if resume and any(record.match.extras for record in self.rows) and (len(self.rows) > 1 or self.rows[0].pad):
            resume = 0  # what layers hold beyond K/V (an indexer's keys) is restored into one unpadded row only
        if self.recurrent:
            # Only where every recurrent layer's state is stored too: the deepest snapshot at or before the hit
            snapshots = self.rows[0].match.snapshots if len(self.rows) == 1 else {}
            resume = max((point for point in snapshots if point <= resume), default=0)
        return resume

    def _load_unpadded_row(self, resume: int, device: torch.device) -> None:
        # One unpadded row: its KV as is, views of the stored edges when one edge holds them (the cache copies
        # them: stored KV is never written to)
        match = self.rows[0].match
        if self.recurrent:
            restore_snapshot(self.cache, match.snapshots[resume], resume, device)
        for layer_index in range(len(self.cache.layers)):
            keys, values = match.row_kv(layer_index, resume)  # (1, heads, resume, head_dim)
            if keys.shape[1] == 0:
                continue  # the layer held no K/V (a running state, restored from the snapshot, or another's K/V)
            if keys.device != device:
                keys, values = keys.to(device), values.to(device)
            if not self._adopt(layer_index, keys, values):
                self.cache.update(keys, values, layer_index)
        # What layers hold per token beyond K/V (an indexer's keys), stored after the layers' K/V
        first = len(self.cache.layers)
        stored = [match.row_kv(first + index, resume)[0] for index in range(len(match.extras.tensors))]
        restore_layer_extras(self.cache, match.extras, stored, device)

    def _load_rows(self, resume: int, device: torch.device) -> None:
        # Several rows, or a padded one: each row's stored KV after its padding, the padding slots left at zero.
        batch_size = len(self.rows)
        for layer_index in range(len(self.cache.layers)):
            keys = values = None
            for record in self.rows:
                length = resume - record.pad
                if length <= 0:
                    continue
                row_keys, row_values = record.match.layer_kv(layer_index, length)  # (heads, length, head_dim)
                if row_keys.shape[0] == 0:
                    break  # the layer held no K/V (it reads another layer's)
                if keys is None:
                    # Padding slots are masked out: any value. Values may have another head dim than keys (MLA).
                    keys = row_keys.new_zeros(
                        (batch_size, row_keys.shape[0], resume, row_keys.shape[-1]), device=device
                    )
                    values = row_values.new_zeros(
                        (batch_size, *row_values.shape[:1], resume, row_values.shape[-1]), device=device
                    )
                keys[record.row, :, record.pad : resume] = row_keys.to(device)
                values[record.row, :, record.pad : resume] = row_values.to(device)
            if keys is not None:
                self.cache.update(keys, values, layer_index)

    def finish(self, sequences: torch.Tensor) -> None:
        """Store every row's prompt and generated tokens whose KV the cache now holds exactly (to the token), then
        leave the call's cache (which `generate` may return) as transformers' own: recording no more."""
        if self.snapshots is not None:
            self.snapshots.stop()
        if self.cache is None or self.root is None:
            return
        try:
            self._store_rows(sequences)
        finally:  # sliding-window layers back to their window: a caller continuing with it would grow it every turn
            stop_recording(self.cache)

    def _store_rows(self, sequences: torch.Tensor) -> None:
        for layer, keys in self.adopted:
            if layer.keys is keys:  # never updated by this call (a layer sharing another's KV): it gets its own copy
                layer.keys, layer.values = layer.keys.clone(), layer.values.clone()
        if len(self.cache.layers) != self.layer_count:
            logger.warning_once(
                f"The prefix cache is not used with this model: its forward added cache layers ({self.layer_count} "
                f"built from its config, {len(self.cache.layers)} after: looped layers, each pass with its own), "
                "which a restored prefix would not have. Nothing is stored."
            )
            return
        length = int(self.cache.get_seq_length())
        try:
            states, extras = stored_layer_states(self.cache, length, len(self.rows), self.item_layers)
        except UnsupportedCacheLayer as error:
            logger.warning_once(f"The prefix cache is not used with this model: {error}. Nothing is stored.")
            return
        if states is None:
            logger.warning_once(
                "The prefix cache stored nothing from a call whose cache dropped states (a sliding-window layer kept "
                "only its window: a static cache, or assisted decoding's crop): stored prefixes are still restored. "
                "Use a dynamic cache without assisted decoding to store them too."
            )
            return
        per_token = key_inputs(self._with_generated(length), self.mask_axes)
        known = min(length, *(value.shape[-1] for value in per_token.values()))
        tokens = host(sequences)
        for record in self.rows:
            if not record.storable:
                continue
            row_keys = key_material_array(
                tokens[record.row, record.pad : known],
                row_inputs(per_token, record.row, record.pad, known),
                record.items_between,
            )

            def kv_between(start: int, end: int, record=record) -> list:
                lo, hi = record.pad + start, record.pad + end
                return [(keys[record.row, :, lo:hi], values[record.row, :, lo:hi]) for keys, values in states]

            snapshots = self.snapshots.row_snapshots(record.row, length) if self.snapshots else None
            intervals = record.intervals_with(row_keys)
            self.store.insert_keys(self.root, row_keys, kv_between, intervals, snapshots, extras)

    def _adopt(self, layer_index: int, keys: torch.Tensor, values: torch.Tensor) -> bool:
        """Make views of stored KV a dynamic layer's states without copying them, as `DynamicLayer.update` would.

        `DynamicLayer.update` copies what it is given into a new tensor, and the first prefill forward copies the
        layer's states again (its `torch.cat` of old and new states): the first copy is pure cost, and at 1k tokens
        it was the larger half of a hit's fixed cost. A dynamic layer never writes its states in place (it
        concatenates, crops by slicing, reorders by indexing), so the views are never written to; a layer that no
        forward of this call updates is given a copy in `finish`. Other layers (sliding windows, offloaded or static
        caches) go through `update`.
        """
        layer = self.cache.layers[layer_index]
        if type(layer) is not DynamicLayer or layer.is_initialized or getattr(self.cache, "offloading", False):
            return False
        layer.device, layer.keys, layer.values, layer.is_initialized = keys.device, keys, values, True
        self.adopted.append((layer, keys))
        return True

    def _with_generated(self, length: int) -> dict[str, torch.Tensor | np.ndarray]:
        # The per-token inputs of the generated tokens as decoding built them: the model's own update rule (e.g.
        # PaliGemma's generated tokens are suffix, Qwen-VL's positions continue from the last one), one token a step.
        # An input the rule does not extend stays short, and only the tokens it covers are stored.
        generated = max(0, length - self.prompt_length)
        kwargs = {key: value for key, value in self.per_token.items() if key != ABSOLUTE_POSITIONS}
        for _ in range(generated):
            # `is_encoder_decoder` named: some families' overrides take it without a default (Llama 3.2 Vision)
            kwargs = self.update_model_kwargs({}, dict(kwargs), is_encoder_decoder=False, num_new_tokens=1)
        extended = {key: kwargs[key] for key in self.per_token if key in kwargs}
        if ABSOLUTE_POSITIONS in self.per_token:
            extended[ABSOLUTE_POSITIONS] = np.arange(self.prompt_length + generated)[None]
        return extended


@functools.lru_cache(maxsize=256)
def _root_key(namespace: tuple[str, ...]) -> bytes:
    # The same few namespaces come back call after call: their digest is computed once
    return PrefixCache.root_key(namespace)
