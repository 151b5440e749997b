"""Unlimited-OCR's reference sliding-window cache layers, which pin the prompt and keep a window of what follows.

The tiny model's window (4) is shorter than its answers, so decoded tokens are dropped. Checked against transformers:
chunked prefill pins the whole prompt as upstream's unchunked `generate` does; a caller's cache continues as one
uncached forward of the whole conversation (its answer joins the pinned part, or is recomputed when the window slid);
the prefix store and the continuous-batching engine refuse these layers clearly.
"""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.families.cases_uocr import build_unlimited_ocr_inputs
from support.references import ATOL, uncached_logits, with_encoder_cache
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, VisionRunCounter

FAMILY = "unlimited_ocr"
# Greedy steps past the window of 4, so the window slides during the answer.
LONG_ANSWER = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False}


def prompt_inputs(config, tail=(30, 31, 32)) -> dict:
    # A system text, an image with 2x1 crops (seed 2) and a user text
    return build_unlimited_ocr_inputs(config, [[5, 6, 7], IMAGE, list(tail)], [2])


@pytest.mark.parametrize(("chunk", "cache_kind"), [(3, "dynamic"), (16, "dynamic"), (3, "static")])
def test_chunked_prefill_pins_the_whole_prompt(chunk, cache_kind):
    upstream, ours = model_pair(FAMILY)
    inputs = prompt_inputs(ours.config)
    length = inputs["input_ids"].shape[1]
    options = {
        **LONG_ANSWER,
        "output_logits": True,
        "return_dict_in_generate": True,
        "cache_implementation": cache_kind,
    }
    if cache_kind == "static":
        options["max_cache_len"] = 64
    expected = upstream.generate(**inputs, **options)
    actual = ours.generate(**inputs, **options, prefill_chunk_size=chunk)
    assert actual.sequences.tolist() == expected.sequences.tolist()
    for step_actual, step_expected in zip(actual.logits, expected.logits, strict=True):
        assert torch.allclose(step_actual, step_expected, atol=ATOL)
    assert [layer.prefill_length for layer in actual.past_key_values.layers] == [length] * 2


@pytest.mark.parametrize("slid", [False, True])
def test_callers_cache_continues_as_the_whole_conversation(slid):
    upstream, ours = model_pair(FAMILY)
    inputs = prompt_inputs(ours.config)
    answer = {**LONG_ANSWER, "max_new_tokens": 8 if slid else 2, "min_new_tokens": 8 if slid else 2}
    first = ours.generate(**inputs, **answer, return_dict_in_generate=True)
    cache = first.past_key_values
    assert any(layer.keys.shape[-2] < layer.cumulative_length for layer in cache.layers) == slid
    conversation = torch.cat([first.sequences, torch.tensor([[40, 41, 42]])], dim=1)
    pixels = {key: value for key, value in inputs.items() if key not in ("input_ids", "attention_mask")}
    whole = {"input_ids": conversation, "attention_mask": torch.ones_like(conversation), **pixels}
    out = ours.generate(**whole, cache=cache, max_new_tokens=1, output_logits=True, return_dict_in_generate=True)
    assert torch.allclose(out.logits[0], uncached_logits(upstream, whole), atol=ATOL)
    assert [layer.prefill_length for layer in out.past_key_values.layers] == [conversation.shape[1]] * 2


def test_callers_static_cache_is_refused():
    upstream, ours = model_pair(FAMILY)
    inputs = prompt_inputs(ours.config)
    static = {"cache_implementation": "static", "max_cache_len": 64, "return_dict_in_generate": True}
    first = ours.generate(**inputs, **LONG_ANSWER, **static)
    conversation = torch.cat([first.sequences, torch.tensor([[40]])], dim=1)
    with pytest.raises(ValueError, match="cannot be continued: its prompt part has a fixed size"):
        ours.generate(input_ids=conversation, cache=first.past_key_values, max_new_tokens=1)


def test_callers_cache_whose_window_slid_needs_the_whole_conversation():
    upstream, ours = model_pair(FAMILY)
    inputs = prompt_inputs(ours.config)
    first = ours.generate(**inputs, **LONG_ANSWER, return_dict_in_generate=True)
    new = torch.tensor([[40, 41, 42]])
    mask = torch.ones(1, first.sequences.shape[1] + new.shape[1], dtype=torch.long)
    with pytest.raises(ValueError, match="window dropped .* pass the whole conversation"):
        ours.generate(input_ids=new, attention_mask=mask, cache=first.past_key_values, max_new_tokens=1)


def test_prefix_store_refuses_pinning_layers():
    upstream, ours = model_pair(FAMILY)
    inputs = prompt_inputs(ours.config)
    store = PrefixCache()
    for _ in range(2):
        sequences = ours.generate(**inputs, **LONG_ANSWER, prefix_cache=store)
        assert sequences.tolist() == upstream.generate(**inputs, **LONG_ANSWER).tolist()
    assert (store.stats.lookups, store.stats.entries) == (0, 0)


def test_an_image_of_crops_is_encoded_once_whatever_the_chunks():
    upstream, ours = model_pair(FAMILY)
    inputs = build_unlimited_ocr_inputs(ours.config, [[5, 6], IMAGE, [30], IMAGE, [31, 32]], [2, 9])
    assert inputs["num_local_patches"] == [2, 2]
    expected = upstream.generate(**inputs, **LONG_ANSWER)
    with with_encoder_cache(ours):
        for chunk_size in (1, 4, 13, None):  # boundaries inside each image's run and between the runs
            with VisionRunCounter(ours) as runs:
                assert (
                    ours.generate(**inputs, **LONG_ANSWER, prefill_chunk_size=chunk_size).tolist() == expected.tolist()
                )
            assert runs.batch_sizes == ([2] if chunk_size == 1 else []), (chunk_size, runs.batch_sizes)


def test_crop_grids_that_do_not_match_are_refused_clearly():
    _, ours = model_pair(FAMILY)
    inputs = prompt_inputs(ours.config)
    with pytest.raises(ValueError, match="`patches_grid` .* does not match `num_local_patches`"):
        ours.generate(**{**inputs, "patches_grid": [[3, 1]]}, max_new_tokens=1)
    with pytest.raises(ValueError, match="without `patches_grid`"):
        ours.generate(**{key: value for key, value in inputs.items() if key != "patches_grid"}, max_new_tokens=1)
