"""Image-aware chunked prefill: exact for every chunk size, with and without a cached prefix, one vision run.

Chunks never cut a bidirectional block (Gemma3's and PaliGemma's images), may end anywhere else, and resume from any
cached prefix; videos are chunked as images are; a static cache is exact wherever transformers' own chunk mask is.
"""

from __future__ import annotations

import tempfile

import pytest
import torch
import transformers

import vlmprep
from conftest import model_pair
from support.caller_caches import cropped_cache
from support.references import (
    SYSTEM,
    USER,
    Prompt,
    assert_close,
    assert_same_steps,
    encoder_runs,
    generate_batch_matching_upstream,
    generate_logits,
    uncached_logits,
)
from support.registry import FAMILY_CASES, scenario
from support.traits import (
    attends_bidirectionally,
    families_with,
    images_and_videos_in_one_prompt,
    sampled,
    videos_behind_image_placeholders,
)
from vlmprep.testing import IMAGE, VIDEO, VisionRunCounter, tiny_gemma3_config

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


def _sampled_lengths(model, prompt: Prompt, stop: int) -> list[int]:
    """Lengths in `1..stop` to check when checking every one is too slow: for each placeholder run, one just inside
    its start, one in its middle and its end (a chunk or cache ending inside each item and just after it)."""
    placeholder = model.vision_facts.modalities[0].placeholder_id(model.config)
    positions = (prompt.input_ids[0] == placeholder).nonzero().flatten().tolist()
    starts = [position for position in positions if position - 1 not in positions]
    ends = [position + 1 for position in positions if position + 1 not in positions]
    lengths = {
        length for start, end in zip(starts, ends, strict=True) for length in (start + 1, (start + end) // 2, end)
    }
    return sorted(length for length in lengths if 1 <= length <= stop)


# Families whose case runs the every-length sweeps under `make test-slow` only (`FamilyCase.slow`): `make test` checks
# them at the sampled lengths: chunk sizes of at least, and cached lengths with chunks of, `SAMPLED_CHUNK_SIZE`.
SAMPLED_SWEEP_FAMILIES = sorted(
    family
    for family, case in FAMILY_CASES.items()
    if {"every_chunk_size_is_exact", "cached_prefix_of_every_length_with_chunks"} & set(case.slow)
)
SAMPLED_CHUNK_SIZE = 16
# The chunk sizes a cached prefix is continued with: chunks ending before, at and after each item's edges.
SMALL_CHUNK_SIZES = (1, 3, 7)


def _check_chunk_sizes(family: str, sampled: bool) -> None:
    upstream, ours = model_pair(family)
    saved_cache, ours.encoder_cache = ours.encoder_cache, None  # count real encoder runs
    try:
        prompt = Prompt(ours.config, TWO_IMAGE_SEGMENTS)
        expected = _reference(upstream, prompt)
        every = range(1, prompt.length + 1)
        sizes = [size for size in _sampled_lengths(ours, prompt, prompt.length) if size >= SAMPLED_CHUNK_SIZE]
        for chunk_size in sizes if sampled else every:
            with VisionRunCounter(ours) as runs:
                actual = generate_logits(ours, prompt.inputs(), max_new_tokens=2, prefill_chunk_size=chunk_size)
            _assert_same(actual, expected)
            assert runs.calls == 1, f"chunk size {chunk_size}: {runs.calls} vision runs"
    finally:
        ours.encoder_cache = saved_cache


@scenario
def test_every_chunk_size_is_exact(family):
    _check_chunk_sizes(family, sampled=False)


def test_gemma3_sliding_window_is_shorter_than_an_image():
    _, ours = model_pair("gemma3")
    assert ours.config.text_config.sliding_window < ours.config.mm_tokens_per_image


@pytest.mark.parametrize("family", families_with(sampled("foundation"), attends_bidirectionally))
def test_upstream_chunking_inside_a_bidirectional_block_is_wrong(family):
    """The bug vlmprep fixes: transformers cuts chunks every N tokens, also inside bidirectional blocks."""
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, TWO_IMAGE_SEGMENTS)
    _, expected_logits = _reference(upstream, prompt)
    _, upstream_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=1, prefill_chunk_size=7)
    assert not torch.allclose(upstream_logits[0], expected_logits[0], atol=1e-5)


def _check_cached_prefixes(family: str, sampled: bool, chunk_sizes: tuple[int, ...] | None = None) -> None:
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, TWO_IMAGE_SEGMENTS)
    expected = _reference(upstream, prompt)
    every = range(1, prompt.length)
    chunk_sizes = chunk_sizes or ((SAMPLED_CHUNK_SIZE,) if sampled else SMALL_CHUNK_SIZES)
    for cached in _sampled_lengths(ours, prompt, prompt.length - 1) if sampled else every:
        for chunk_size in chunk_sizes:
            cache = cropped_cache(upstream, prompt.inputs(), cached)
            actual = generate_logits(
                ours, prompt.inputs(), max_new_tokens=2, cache=cache, prefill_chunk_size=chunk_size
            )
            _assert_same(actual, expected)


# Every cached length with every small chunk size is ~4.5 min over the registry on this machine: `make test-slow` runs
# it, `make test` the lengths where a cache ends just inside, in the middle of and just after each item.
@pytest.mark.slow
@scenario
def test_cached_prefix_of_every_length_with_chunks(family):
    _check_cached_prefixes(family, sampled=False)


@scenario(name="cached_prefix_of_every_length_with_chunks")
def test_cached_prefix_ending_at_each_item_edge_with_small_chunks(family):
    _check_cached_prefixes(family, sampled=True, chunk_sizes=SMALL_CHUNK_SIZES)


@pytest.mark.parametrize("family", SAMPLED_SWEEP_FAMILIES)
def test_sampled_chunk_sizes_and_cached_lengths(family):
    """`make test`'s share of the sweeps a family runs only under `make test-slow` (its prompts are long): chunk
    sizes and cache lengths next to every item's ends, and a few more."""
    _check_chunk_sizes(family, sampled=True)
    _check_cached_prefixes(family, sampled=True)


@scenario
def test_chunked_batch_matches_unchunked_batch(family):
    """A left-padded batch, chunked or not: each row equals transformers on that row's prompt alone (uncached)."""
    upstream, ours = model_pair(family)
    one = Prompt(ours.config, [[2, 10], IMAGE, [11]], image_seeds=[1])
    two = Prompt(ours.config, TWO_IMAGE_SEGMENTS, image_seeds=[2, 3])
    for chunk_size in (None, 1, 4, 9):
        generate_batch_matching_upstream(upstream, ours, [one, two], prefill_chunk_size=chunk_size)


# -- Videos -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", families_with(images_and_videos_in_one_prompt))
def test_every_chunk_size_is_exact_with_a_video(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [[2, 10], VIDEO, [11, 12], IMAGE, [13]], image_seeds=[1, 2])
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    for chunk_size in range(1, prompt.length + 1):
        with encoder_runs(ours) as runs:
            sequences, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2, prefill_chunk_size=chunk_size)
        assert torch.equal(sequences, expected_sequences), f"chunk size {chunk_size}"
        assert_same_steps(logits, expected_logits)
        assert runs.batch_sizes == [1, 1], f"chunk size {chunk_size}: {runs.batch_sizes}"


@pytest.mark.parametrize("family", families_with(videos_behind_image_placeholders))
def test_every_chunk_size_is_exact_with_video_frames_of_image_placeholders(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [[2, 10], VIDEO, [11, 12]], image_seeds=[1])
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    for chunk_size in range(1, prompt.length + 1):
        sequences, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2, prefill_chunk_size=chunk_size)
        assert torch.equal(sequences, expected_sequences), f"chunk size {chunk_size}"
        assert_same_steps(logits, expected_logits)


# -- Static cache: Gemma3 with image blocks longer and shorter than its sliding window --------------------------------


@pytest.fixture(scope="module")
def gemma3_pairs():
    """Image-sensitive Gemma3 pairs whose sliding window (6) is shorter / longer than an image block (16 / 4)."""
    pairs = {}
    for tokens in (16, 4):
        torch.manual_seed(0)
        upstream = transformers.Gemma3ForConditionalGeneration(tiny_gemma3_config(mm_tokens_per_image=tokens))
        with torch.no_grad():  # upstream init zeroes the projector: images would never reach the logits
            upstream.model.multi_modal_projector.mm_input_projection_weight.normal_(std=0.5)
        directory = tempfile.mkdtemp(prefix="vlmprep-exact-")
        upstream.save_pretrained(directory)
        pairs[tokens] = (
            transformers.Gemma3ForConditionalGeneration.from_pretrained(directory).eval(),
            vlmprep.Gemma3ForConditionalGeneration.from_pretrained(directory).eval(),
        )
    return pairs


@pytest.mark.parametrize("tokens", [16, 4])
@pytest.mark.parametrize("chunk_size", [3, 8, 12])
def test_static_cache_chunks_after_cached_tokens_with_an_image_block_are_refused(gemma3_pairs, chunk_size, tokens):
    # transformers builds a static cache's mask from the chunk's token types alone: its logits are off (it is wrong
    # there itself), so vlmprep refuses rather than answer wrongly.
    upstream, ours = gemma3_pairs[tokens]
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    with pytest.raises(ValueError, match="static cache"):
        ours.generate(
            **prompt.inputs(), max_new_tokens=1, prefill_chunk_size=chunk_size, cache_implementation="static"
        )
    # The dynamic cache (the default) is exact for the same chunks.
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefill_chunk_size=chunk_size)
    assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))


@pytest.mark.parametrize("chunk_size", [3, 5, 8])
def test_static_cache_text_chunks_are_exact(gemma3_pairs, chunk_size):
    # Chunks may still be cut anywhere in text, and an image inside the first chunk is fine.
    upstream, ours = gemma3_pairs[4]
    prompt = Prompt(ours.config, [[2, 10], IMAGE, SYSTEM, USER])
    _, logits = generate_logits(
        ours, prompt.inputs(), max_new_tokens=1, prefill_chunk_size=chunk_size + 6, cache_implementation="static"
    )
    assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))


def test_static_cache_unchunked_is_exact(gemma3_pairs):
    upstream, ours = gemma3_pairs[16]
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, cache_implementation="static")
    assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))
