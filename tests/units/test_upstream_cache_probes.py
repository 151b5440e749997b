"""Behavioural probes of what vlmprep relies on in transformers' cache layers, one tiny model per decoder kind.

A name check (`utils/check_upstream_hooks.py`) cannot see a change of meaning: transformers 5.25 kept every name and
changed what `get_seq_length` reads (layer 0's own count), what `activate_past_recording()` stores and what
`is_croppable` answers. These probes run in seconds on the plain transformers classes, with vlmprep's snapshot and
rollback code in between, and compare with one uncached forward of the whole prompt; run them first on a new release
(docs/contributing.md).
"""

from __future__ import annotations

import pytest
import torch
from test_cache_identity import fresh_pair
from transformers import DynamicCache

from conftest import model_pair
from support.references import assert_close, uncached_logits
from vlmprep.cache.recording import record_past
from vlmprep.cache.recurrent_state import recurrent_layer_indices, restore_snapshot, snapshot_of_row
from vlmprep.generation.cache_rollback import roll_back_cache

TOKENS = torch.tensor([[2, *range(10, 29)]])  # 20 text tokens, longer than the tiny sliding windows (6)
DECODER_KINDS = {
    "attention": "llava",
    "sliding window": "gemma3",
    "gated deltanet": "qwen3_5",
    "convolution": "lfm2_vl",
    "mamba-2": "nemotron_h_omni",
}
RECURRENT_KINDS = ["gated deltanet", "mamba-2"]


def _forward(model, tokens: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=tokens, cache=cache, use_cache=True).logits[:, -1]


def _filled_cache(model, ends: list[int], record: bool = True, recurrent_layers: bool = False) -> DynamicCache:
    # A cache filled by forwards ending at `ends`, recording as the prefix store's call cache does (sliding-window
    # layers only), or every layer as a caller's cache might
    cache = DynamicCache(config=model.config)
    if record:
        record_past(cache, recurrent_layers=recurrent_layers)
    start = 0
    for end in ends:
        _forward(model, TOKENS[:, start:end], cache)
        start = end
    return cache


@pytest.mark.parametrize("kind", DECODER_KINDS)
def test_a_prefix_restored_into_a_fresh_cache_counts_its_tokens_and_resumes_exactly(kind):
    # A model of its own: in whole-suite runs the session's shared Qwen3.5 pair gave 1.7e-2 here (never alone or with
    # this file; the state an earlier test leaves on it is not found yet: see the issue note)
    upstream, _ = fresh_pair(DECODER_KINDS[kind])
    cut = 12
    filled = _filled_cache(upstream, [8, cut])
    fresh = DynamicCache(config=upstream.config)
    if recurrent_layer_indices(filled):
        restore_snapshot(fresh, snapshot_of_row(filled, 0, cut, None), cut, torch.device("cpu"))
    for index, layer in enumerate(filled.layers):
        keys = getattr(layer, "keys", None)
        if isinstance(keys, torch.Tensor) and keys.ndim == 4:
            assert keys.shape[-2] == cut, "a recording layer holds every token"
            fresh.update(keys.clone(), layer.values.clone(), index)
    # transformers >= 5.25 reads layer 0's own count: a convolution or a recurrent layer's must say `cut` too
    assert int(fresh.get_seq_length()) == cut
    _forward(upstream, TOKENS[:, cut:-1], fresh)  # a prefill chunk on top of the restored states
    logits = _forward(upstream, TOKENS[:, -1:], fresh)  # one decoded token (the in-place decode kernels)
    assert_close(logits, uncached_logits(upstream, {"input_ids": TOKENS}))
    assert int(fresh.get_seq_length()) == TOKENS.shape[1]


@pytest.mark.parametrize("kind", RECURRENT_KINDS)
def test_recording_on_a_recurrent_layer_runs_and_a_recurrent_state_is_never_rolled_back(kind):
    upstream, _ = model_pair(DECODER_KINDS[kind])
    # Every layer recording, as a caller's cache may be: the forwards run (5.25.0's bare `activate_past_recording()`
    # stored `None`, a TypeError in them), and four forwards of three tokens leave a history of four states, one per
    # forward: transformers 5.25's `crop(-3)` would take the state after token 3 for the one after token 9
    cache = _filled_cache(upstream, [3, 6, 9, 12], recurrent_layers=True)
    assert roll_back_cache(cache, 12, 9) == 0, "emptied: prefill starts over"
    assert int(cache.get_seq_length()) == 0
    logits = _forward(upstream, TOKENS, cache)
    assert_close(logits, uncached_logits(upstream, {"input_ids": TOKENS}))


def test_a_recording_convolution_rolls_back_exactly_and_one_keeping_its_window_only_is_emptied():
    upstream, _ = model_pair(DECODER_KINDS["convolution"])
    expected = uncached_logits(upstream, {"input_ids": TOKENS})
    recording = _filled_cache(upstream, [8, 12], recurrent_layers=True)
    assert roll_back_cache(recording, 12, 9) == 9
    assert int(recording.get_seq_length()) == 9
    assert_close(_forward(upstream, TOKENS[:, 9:], recording), expected)
    window_only = _filled_cache(upstream, [8, 12], record=False)
    assert roll_back_cache(window_only, 12, 9) == 0
    assert_close(_forward(upstream, TOKENS, window_only), expected)
