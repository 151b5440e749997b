"""Unit tests of recurrent-state snapshots: read from and restored into transformers' own cache layers, kept on radix
nodes (split, evicted and counted with them)."""

from __future__ import annotations

import torch
from transformers import DynamicCache, Qwen3_5TextConfig

from vlmprep.cache.prefix_cache import PrefixCache, key_material_array
from vlmprep.cache.recording import record_past, stop_recording
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


def _tiny_cache(record: bool = False) -> DynamicCache:
    config = Qwen3_5TextConfig(
        num_hidden_layers=2, layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=KERNEL
    )
    cache = DynamicCache(config=config)
    if record:
        record_past(cache)
    return cache


def _feed(cache: DynamicCache, inputs: torch.Tensor, state: float) -> None:
    # What a Gated DeltaNet forward hands its cache layer: its convolution's inputs, then its new recurrent state
    cache.update_conv_state(inputs, 0, conv_kernel_size=KERNEL)
    cache.update_recurrent_state(torch.full((inputs.shape[0], 5), state), 0)


def test_snapshots_are_the_states_after_a_forward_and_restored_as_a_forward_would():
    cache = _tiny_cache()  # the store's call cache: its running-state layers do not record
    assert recurrent_layer_indices(cache) == [0]
    inputs = torch.arange(2 * 3 * 6, dtype=torch.float32).view(2, 3, 6)  # (batch, channels, tokens)
    _feed(cache, inputs[..., :2], 1.0)
    after_two = capture_recurrent_states(cache, 2)
    _feed(cache, inputs[..., 2:], 7.0)

    at_two = snapshot_of_row(cache, 1, 6, after_two)
    (_, _, kernel, window, state) = at_two.states[0]
    # Before token 0 the window is zeros, as transformers pads a short prefill
    assert kernel == KERNEL and torch.equal(window, torch.nn.functional.pad(inputs[1, :, :2], (2, 0)))
    assert torch.equal(state, torch.ones(5))
    (_, _, _, window, state) = snapshot_of_row(cache, 0, 6, None).states[0]
    assert torch.equal(window, inputs[0, :, 2:]) and torch.equal(state, torch.full((5,), 7.0))
    # A point whose states were not captured is not known
    assert snapshot_of_row(cache, 0, 6, {}) is None

    fresh = _tiny_cache()
    restore_snapshot(fresh, at_two, 2, torch.device("cpu"))
    assert torch.equal(fresh.get_conv_state(0)[0], at_two.states[0][3])
    assert torch.equal(fresh.get_recurrent_state(0)[0], torch.ones(5))
    # transformers >= 5.25 counts tokens per linear-attention layer: the restored prefix's, not the window's
    counter = getattr(fresh.layers[0], "cumulative_length_linear", None)
    assert counter is None or int(counter) == 2


def test_a_recording_convolution_gives_its_last_window_or_none_before_its_first_input():
    cache = _tiny_cache(record=True)  # a convolution recording for the sliding-window attention of its layer
    inputs = torch.arange(3 * 6, dtype=torch.float32).view(1, 3, 6)
    _feed(cache, inputs[..., :2], 1.0)
    (window, _) = capture_recurrent_states(cache, 2)[(0, 0)]
    assert torch.equal(window, torch.nn.functional.pad(inputs[..., :2], (2, 0)))
    _feed(cache, inputs[..., 2:], 2.0)
    (window, _) = capture_recurrent_states(cache, 6)[(0, 0)]
    assert torch.equal(window, inputs[..., 2:])
    # Fewer recorded inputs than the kernel, not from token 0 on: the window there is not known
    short = _tiny_cache(record=True)
    _feed(short, inputs[..., :2], 1.0)
    assert (0, 0) not in capture_recurrent_states(short, 5)


def test_stopping_recording_leaves_the_layer_as_if_it_never_recorded():
    cache = _tiny_cache(record=True)
    inputs = torch.arange(3 * 7, dtype=torch.float32).view(1, 3, 7)
    for token in range(7):  # transformers >= 5.25 also keeps a past recurrent state per forward while recording
        _feed(cache, inputs[..., token : token + 1], float(token))
    assert cache.get_conv_state(0).shape[-1] == 7
    stop_recording(cache)
    layer = cache.layers[0]
    assert not layer.record_past and torch.equal(cache.get_conv_state(0), inputs[..., -KERNEL:])
    assert all(not states for states in getattr(layer, "recurrent_states_history", {}).values())
    _feed(cache, inputs[..., :1], 9.0)  # a forward without recording keeps the window
    assert cache.get_conv_state(0).shape[-1] == KERNEL
