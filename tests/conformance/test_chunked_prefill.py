"""Image-aware chunked prefill: exact for every chunk size, with and without a cached prefix, one vision run."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from conftest import model_pair
from family_registry import families_for
from helpers import NO_SPECIAL_TOKENS, Prompt, assert_batch_matches_upstream, assert_close, collate, generate_logits
from vlmprep.testing import IMAGE, VisionRunCounter

TWO_IMAGE_SEGMENTS = [[2, 10, 11, 12], IMAGE, [13, 14, 15], IMAGE, [16, 17]]


def _reference(upstream, prompt: Prompt):
    """Greedy tokens and per-step logits of upstream's uncached, unchunked generate."""
    return generate_logits(upstream, prompt.inputs(), max_new_tokens=2)


def _assert_same(actual, expected) -> None:
    sequences, logits = actual
    expected_sequences, expected_logits = expected
    assert torch.equal(sequences, expected_sequences)
    for step_actual, step_expected in zip(logits, expected_logits, strict=True):
        assert_close(step_actual, step_expected)


@pytest.mark.parametrize("family", families_for("every_chunk_size_is_exact"))
def test_every_chunk_size_is_exact(family):
    upstream, ours = model_pair(family)
    saved_cache, ours.encoder_cache = ours.encoder_cache, None  # count real encoder runs
    try:
        prompt = Prompt(ours.config, TWO_IMAGE_SEGMENTS)
        expected = _reference(upstream, prompt)
        for chunk_size in range(1, prompt.length + 1):
            with VisionRunCounter(ours) as runs:
                actual = generate_logits(ours, prompt.inputs(), max_new_tokens=2, prefill_chunk_size=chunk_size)
            _assert_same(actual, expected)
            assert runs.calls == 1, f"chunk size {chunk_size}: {runs.calls} vision runs"
    finally:
        ours.encoder_cache = saved_cache


def test_gemma3_sliding_window_is_shorter_than_an_image():
    _, ours = model_pair("gemma3")
    assert ours.config.text_config.sliding_window < ours.config.mm_tokens_per_image


@pytest.mark.parametrize("family", ["gemma3", "paligemma"])
def test_upstream_chunking_inside_a_bidirectional_block_is_wrong(family):
    """The bug vlmprep fixes: transformers cuts chunks every N tokens, also inside bidirectional blocks."""
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, TWO_IMAGE_SEGMENTS)
    _, expected_logits = _reference(upstream, prompt)
    _, upstream_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=1, prefill_chunk_size=7)
    assert not torch.allclose(upstream_logits[0], expected_logits[0], atol=1e-5)


def _cropped_cache(upstream, prompt: Prompt, length: int) -> DynamicCache:
    cache = DynamicCache(config=upstream.config)
    cache.activate_past_recording()  # lets the test crop past Gemma3's sliding window
    with torch.no_grad():
        upstream(**prompt.inputs(), cache=cache, use_cache=True)
    cache.crop(length - prompt.length)
    return cache


@pytest.mark.parametrize("family", families_for("cached_prefix_of_every_length_with_chunks"))
def test_cached_prefix_of_every_length_with_chunks(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, TWO_IMAGE_SEGMENTS)
    expected = _reference(upstream, prompt)
    for cached in range(1, prompt.length):
        for chunk_size in (1, 3, 7):
            cache = _cropped_cache(upstream, prompt, cached)
            actual = generate_logits(
                ours, prompt.inputs(), max_new_tokens=2, cache=cache, prefill_chunk_size=chunk_size
            )
            _assert_same(actual, expected)


@pytest.mark.parametrize("family", families_for("chunked_batch_matches_unchunked_batch"))
def test_chunked_batch_matches_unchunked_batch(family):
    """A left-padded batch, chunked or not: each row equals transformers on that row's prompt alone (uncached)."""
    upstream, ours = model_pair(family)
    one = Prompt(ours.config, [[2, 10], IMAGE, [11]], image_seeds=[1])
    two = Prompt(ours.config, TWO_IMAGE_SEGMENTS, image_seeds=[2, 3])
    batch = collate([one, two], ours.generation_config.pad_token_id)
    for chunk_size in (None, 1, 4, 9):
        sequences, logits = generate_logits(
            ours, batch, max_new_tokens=2, prefill_chunk_size=chunk_size, **NO_SPECIAL_TOKENS
        )
        assert_batch_matches_upstream(upstream, [one, two], sequences, logits)
