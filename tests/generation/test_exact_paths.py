"""Paths a demanding user takes that used to give silent wrong output or a raw crash (issue 11), against upstream."""

from __future__ import annotations

import tempfile

import pytest
import torch
import transformers

import vlmprep
from conftest import model_pair
from helpers import Prompt, assert_close, collate, generate_logits
from vlmprep.testing import IMAGE, tiny_gemma3_config

SYSTEM = [2, 10, 11, 12, 13, 14, 15, 16]
USER = [20, 21, 22]


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


def _reference(upstream, prompt: Prompt) -> torch.Tensor:
    with torch.no_grad():
        return upstream(**prompt.inputs(), use_cache=False).logits[:, -1]


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
    assert_close(logits[0], _reference(upstream, prompt))


@pytest.mark.parametrize("chunk_size", [3, 5, 8])
def test_static_cache_text_chunks_are_exact(gemma3_pairs, chunk_size):
    # Chunks may still be cut anywhere in text, and an image inside the first chunk is fine.
    upstream, ours = gemma3_pairs[4]
    prompt = Prompt(ours.config, [[2, 10], IMAGE, SYSTEM, USER])
    _, logits = generate_logits(
        ours, prompt.inputs(), max_new_tokens=1, prefill_chunk_size=chunk_size + 6, cache_implementation="static"
    )
    assert_close(logits[0], _reference(upstream, prompt))


def test_static_cache_unchunked_is_exact(gemma3_pairs):
    upstream, ours = gemma3_pairs[16]
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, cache_implementation="static")
    assert_close(logits[0], _reference(upstream, prompt))


@pytest.mark.parametrize("chunk_size", [2.5, "8", 0, -1, True])
def test_bad_prefill_chunk_size_is_a_clear_type_error(chunk_size):
    _, ours = model_pair("llava")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    with pytest.raises(TypeError, match="prefill_chunk_size"):
        ours.generate(**prompt.inputs(), max_new_tokens=1, prefill_chunk_size=chunk_size)


def test_empty_prompt_is_refused_clearly():
    _, ours = model_pair("llava")
    with pytest.raises(ValueError, match="empty"):
        ours.generate(input_ids=torch.zeros(1, 0, dtype=torch.long), max_new_tokens=1)


@pytest.mark.parametrize("bad_value", [float("nan"), float("inf")])
@pytest.mark.parametrize("family", ["llava", "qwen2_vl"])
def test_non_finite_pixels_are_refused_before_encoding(family, bad_value):
    _, ours = model_pair(family)
    inputs = Prompt(ours.config, [SYSTEM, IMAGE, USER]).inputs()
    inputs["pixel_values"] = inputs["pixel_values"].clone()
    inputs["pixel_values"].view(-1)[3] = bad_value
    with pytest.raises(ValueError, match="NaN or infinite"):
        ours.generate(**inputs, max_new_tokens=1)


@pytest.mark.parametrize("family", ["exaone4_5", "hyperclovax_vision_v2", "llava"])
def test_prefix_store_serves_no_kv_computed_at_another_padding_offset(family):
    # EXAONE 4.5 and HyperCLOVAX number decoder positions by cache place, left padding included: a row stored at one
    # padding offset must not serve a row at another (found by the differential test).
    upstream, ours = model_pair(family)
    pad = ours.generation_config.pad_token_id
    store = vlmprep.PrefixCache()
    first, second, third = (Prompt(ours.config, [ids]) for ids in (list(range(5, 25)), list(range(30, 42)), SYSTEM))
    generate_logits(ours, collate([first, second], pad), max_new_tokens=1, prefix_cache=store)
    batch = collate([third, second], pad)
    _, logits = generate_logits(ours, batch, max_new_tokens=2, prefix_cache=store)
    _, expected = generate_logits(upstream, batch, max_new_tokens=2)
    for step, expected_step in zip(logits, expected, strict=True):
        assert_close(step, expected_step)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"num_beams": 2}, "beam search"),
        ({"use_cache": False}, "use_cache=False"),
        ({"num_return_sequences": 2, "do_sample": True}, "num_return_sequences"),
        ({"cache": "caller"}, "a `cache` is passed"),
    ],
    ids=["beams", "no_cache", "return_sequences", "passed_cache"],
)
def test_a_skipped_prefix_cache_says_why_once(kwargs, reason, capsys):
    import logging as std_logging

    from transformers import DynamicCache

    _, ours = model_pair("llava")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    if kwargs.get("cache") == "caller":
        kwargs = {"cache": DynamicCache(config=ours.config)}
    std_logging.Logger.warning_once.cache_clear()  # once per process: start from a clean slate
    store = vlmprep.PrefixCache()
    for _ in range(2):
        ours.generate(**prompt.inputs(), max_new_tokens=1, prefix_cache=store, **kwargs)
        kwargs.pop("cache", None)
    err = capsys.readouterr().err
    assert err.count("The prefix cache is not used") == 1 and reason in err


def test_prefix_cache_is_skipped_for_decoders_with_running_state_layers(capsys):
    # LFM2-VL's conv layers keep a running state, not per-token KV: no prefix can be stored or restored, and saying
    # so beats storing nothing silently on every call.
    import logging as std_logging

    from family_registry import FAMILY_CASES

    upstream, ours = model_pair("lfm2_vl")
    inputs = FAMILY_CASES["lfm2_vl"].build_inputs(ours.config, [[3, 4, 5], IMAGE, [6, 7]], [1])
    std_logging.Logger.warning_once.cache_clear()
    store = vlmprep.PrefixCache()
    for _ in range(2):
        _, logits = generate_logits(ours, inputs, max_new_tokens=2, prefix_cache=store)
    _, expected = generate_logits(upstream, inputs, max_new_tokens=2)
    for step, expected_step in zip(logits, expected, strict=True):
        assert_close(step, expected_step)
    err = capsys.readouterr().err
    assert err.count("The prefix cache is not used") == 1 and "running state" in err
    assert store.stats.lookups == 0 and store.stats.entries == 0
