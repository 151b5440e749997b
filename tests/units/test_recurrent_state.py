"""Unit tests of recurrent-state snapshots: read from and restored into transformers' own cache layers, kept on radix
nodes (split, evicted and counted with them)."""

from __future__ import annotations

import torch
from transformers import DynamicCache, Qwen3_5TextConfig

from vlmprep.cache.prefix_cache import PrefixCache, key_material_array
from vlmprep.cache.recurrent_state import (
    StateSnapshot,
    capture_recurrent_states,
    recurrent_layer_indices,
    restore_snapshot,
    snapshot_of_row,
)

ROOT = PrefixCache.root_key(("model",))
KERNEL = 4


def _keys(tokens: list[int]):
    return key_material_array(torch.tensor(tokens), {}, lambda start, end: [])


def _kv(start: int, end: int):
    return [(torch.zeros(1, end - start, 1), torch.zeros(1, end - start, 1))]


def _snapshot(value: float, numbers: int = 8) -> StateSnapshot:
    return StateSnapshot(((0, 0, KERNEL, None, torch.full((numbers,), value)),))


def test_a_snapshot_inside_an_edge_splits_it_and_is_matched_only_when_reached():
    store = PrefixCache()
    tokens = list(range(10, 20))
    store.insert_keys(ROOT, _keys(tokens), _kv, snapshots={4: _snapshot(4.0), 10: _snapshot(10.0)})
    stats = store.stats
    assert stats.entries == 2 and stats.snapshots == 2 and stats.snapshot_bytes == 2 * 8 * 4
    assert stats.bytes > stats.snapshot_bytes
    match = store.match_keys(ROOT, _keys([*tokens[:6], 99]))
    assert match.tokens == 6 and sorted(match.snapshots) == [4]
    assert sorted(store.match_keys(ROOT, _keys(tokens)).snapshots) == [4, 10]


def test_snapshots_go_with_their_node_and_a_trimmed_edge_drops_its_own():
    store = PrefixCache(max_bytes=1200)
    first = list(range(10, 20))
    store.insert_keys(ROOT, _keys(first), _kv, snapshots={10: _snapshot(1.0, numbers=64)})
    assert store.stats.snapshots == 1
    # A second row needing room trims the first one's tail: the edge no longer ends where its snapshot was taken
    store.insert_keys(ROOT, _keys(list(range(30, 45))), _kv)
    stats = store.stats
    assert stats.evictions > 0 and stats.snapshots == 0 and stats.snapshot_bytes == 0
    assert stats.bytes <= stats.max_bytes
    store.clear()
    assert store.stats.snapshots == 0 and store.stats.snapshot_bytes == 0


def _tiny_cache() -> tuple[DynamicCache, Qwen3_5TextConfig]:
    config = Qwen3_5TextConfig(
        num_hidden_layers=2, layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=KERNEL
    )
    cache = DynamicCache(config=config)
    cache.activate_past_recording()
    return cache, config


def test_snapshots_are_read_from_the_recorded_inputs_and_restored_as_a_forward_would():
    cache, _ = _tiny_cache()
    assert recurrent_layer_indices(cache) == [0]
    inputs = torch.arange(2 * 3 * 6, dtype=torch.float32).view(2, 3, 6)  # (batch, channels, tokens)
    cache.update_conv_state(inputs[..., :2], 0, conv_kernel_size=KERNEL)
    cache.update_recurrent_state(torch.ones(2, 5), 0)
    after_two = capture_recurrent_states(cache)
    cache.update_conv_state(inputs[..., 2:], 0, conv_kernel_size=KERNEL)
    cache.update_recurrent_state(torch.full((2, 5), 7.0), 0)

    at_two = snapshot_of_row(cache, 1, 6, 2, after_two)
    (_, _, kernel, window, state) = at_two.states[0]
    # Before token 0 the window is zeros, as transformers pads a short prefill
    assert kernel == KERNEL and torch.equal(window, torch.nn.functional.pad(inputs[1, :, :2], (2, 0)))
    assert torch.equal(state, torch.ones(5))
    (_, _, _, window, state) = snapshot_of_row(cache, 0, 6, 6, None).states[0]
    assert torch.equal(window, inputs[0, :, 2:]) and torch.equal(state, torch.full((5,), 7.0))
    # A point after the last forward's start without a captured state is not known
    assert snapshot_of_row(cache, 0, 6, 4, {}) is None

    fresh, _ = _tiny_cache()
    restore_snapshot(fresh, at_two, torch.device("cpu"))
    assert torch.equal(fresh.get_conv_state(0)[0], at_two.states[0][3])
    assert torch.equal(fresh.get_recurrent_state(0)[0], torch.ones(5))


def test_under_a_tight_budget_the_row_end_snapshot_is_kept_and_the_row_never_trimmed_for_snapshots():
    tokens = list(range(10, 20))
    store = PrefixCache(max_bytes=10 * 48 + 300)  # the row (48 bytes a token) and one 256-byte snapshot
    store.insert_keys(ROOT, _keys(tokens), _kv, snapshots={4: _snapshot(4.0, numbers=64), 10: _snapshot(1.0, 64)})
    stats = store.stats
    assert stats.tokens == 10 and stats.snapshots == 1 and stats.bytes <= stats.max_bytes
    assert sorted(store.match_keys(ROOT, _keys(tokens)).snapshots) == [10]
