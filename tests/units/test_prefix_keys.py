"""The prefix cache's keys cover every input that changes a block's KV, and it composes with every cache kind.

Every check compares with the plain transformers class holding the same weights: one uncached forward of the whole
prompt, or upstream `generate` where the reference needs its positions (masks with holes) or several steps.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from conftest import model_pair
from support.references import (
    Prompt,
    assert_close,
    assert_same_steps,
    collate,
    generate_logits,
    strong_image_gemma3_pair,
    uncached_logits,
)
from support.registry import FAMILY_CASES
from support.traits import families_with, has_multimodal_rope, not_, sampled
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, TINY_BOI_TOKEN_ID, TINY_EOI_TOKEN_ID

SYSTEM = [2, *range(10, 21)]  # 12 tokens


def image_sensitive_gemma3_pair():
    return strong_image_gemma3_pair(0.02)


def first_logits(ours, inputs: dict, store: PrefixCache, **kwargs) -> torch.Tensor:
    return generate_logits(ours, inputs, max_new_tokens=1, prefix_cache=store, **kwargs)[1][0]


# -- Keys: token types, positions, images ----------------------------------------------------------------------------


def test_paligemma_suffix_does_not_reuse_prefix_kv():
    upstream, ours = model_pair("paligemma")
    store = PrefixCache(block_size=4)
    prompt = Prompt(ours.config, [IMAGE, [*range(30, 42)]], image_seeds=[1])
    first_logits(ours, prompt.inputs(), store)  # all prefix: the whole prompt is one bidirectional block
    with_suffix = prompt.inputs()
    with_suffix["token_type_ids"] = with_suffix["token_type_ids"].clone()
    with_suffix["token_type_ids"][:, -6:] = 1  # same ids, the last 6 tokens are a causal suffix
    assert_close(first_logits(ours, with_suffix, store), uncached_logits(upstream, with_suffix))


def test_gemma3_explicit_causal_token_types_do_not_reuse_bidirectional_kv():
    upstream, ours = image_sensitive_gemma3_pair()
    store = PrefixCache(block_size=4)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [*range(30, 40)]], image_seeds=[1])
    first_logits(ours, prompt.inputs(), store)  # derived token types: the image attends to itself both ways
    causal = {**prompt.inputs(), "token_type_ids": torch.zeros_like(prompt.input_ids)}
    expected = uncached_logits(upstream, causal)
    assert not torch.allclose(expected, uncached_logits(upstream, prompt.inputs()), atol=1e-4), "types must matter"
    assert_close(first_logits(ours, causal, store), expected)


def test_qwen2_5_vl_video_timing_is_part_of_the_key():
    upstream, ours = model_pair("qwen2_5_vl")
    store = PrefixCache(block_size=4)
    prompt = Prompt(ours.config, [SYSTEM, "<video>", [*range(30, 40)]], image_seeds=[0])
    first_logits(ours, prompt.inputs(), store)
    slower = {**prompt.inputs(), "second_per_grid_ts": prompt.inputs()["second_per_grid_ts"] * 3}
    expected = uncached_logits(upstream, slower)
    assert not torch.allclose(expected, uncached_logits(upstream, prompt.inputs()), atol=1e-4), "positions matter"
    assert_close(first_logits(ours, slower, store), expected)


def test_gemma3_adjacent_images_hit_inside_the_block_needs_the_same_images():
    upstream, ours = image_sensitive_gemma3_pair()
    store = PrefixCache(block_size=4)
    image_run = [ours.config.image_token_id] * (2 * ours.config.mm_tokens_per_image)  # two images, touching
    ids = torch.tensor([[*SYSTEM, TINY_BOI_TOKEN_ID, *image_run, TINY_EOI_TOKEN_ID, 30, 31]])
    case = FAMILY_CASES["gemma3"]
    token_types = (ids == ours.config.image_token_id).long()  # the processor's: the two images are one block

    def inputs(seeds):
        pixels = case.build_inputs(ours.config, [IMAGE] * len(seeds), seeds)["pixel_values"]
        return {"input_ids": ids, "pixel_values": pixels, "token_type_ids": token_types}

    first_logits(ours, inputs([1, 2]), store)
    second = inputs([1, 3])  # the same first image: blocks before the second image's tokens are stored
    reused_before = store.stats.tokens_reused
    actual = first_logits(ours, second, store)
    assert_close(actual, uncached_logits(upstream, second))
    assert store.stats.tokens_reused - reused_before == len(SYSTEM) + 1, "rolled back to the block start"
    # The very same images again: the hit inside the block is exact and kept.
    assert_close(first_logits(ours, inputs([1, 3]), store), uncached_logits(upstream, second))


# -- Masks with holes, padding, train mode ---------------------------------------------------------------------------


@pytest.mark.parametrize("stored_first", [True, False], ids=["hit", "miss"])
def test_mask_with_a_hole_is_exact(stored_first):
    upstream, ours = model_pair("llava")
    store = PrefixCache(block_size=4)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [*range(30, 40)]], image_seeds=[1])
    if stored_first:
        first_logits(ours, prompt.inputs(), store)
    holed = {**prompt.inputs(), "attention_mask": torch.ones_like(prompt.input_ids)}
    holed["attention_mask"][:, 3] = 0
    _, expected = generate_logits(upstream, holed, max_new_tokens=2)
    _, actual = generate_logits(ours, holed, max_new_tokens=2, prefix_cache=store)
    assert_same_steps(actual, expected)


def test_fully_padded_rows_that_miss_the_store():
    upstream, ours = model_pair("llava")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[1])
    pad_id = 0
    # A padded batch of one
    padded = {
        "input_ids": torch.nn.functional.pad(prompt.input_ids, (3, 0), value=pad_id),
        "attention_mask": torch.nn.functional.pad(torch.ones_like(prompt.input_ids), (3, 0)),
        "pixel_values": prompt.pixel_values,
    }
    _, expected = generate_logits(upstream, padded, max_new_tokens=2)
    _, actual = generate_logits(ours, padded, max_new_tokens=2, prefix_cache=PrefixCache(block_size=4))
    assert_same_steps(actual, expected)
    # A batch with a fully padded row
    batch = collate([prompt, prompt], pad_id)
    batch["input_ids"] = batch["input_ids"].clone()
    batch["input_ids"][1] = pad_id
    batch["attention_mask"][1] = 0
    batch["pixel_values"] = prompt.pixel_values
    _, expected = generate_logits(upstream, batch, max_new_tokens=2)
    _, actual = generate_logits(ours, batch, max_new_tokens=2, prefix_cache=PrefixCache(block_size=4))
    for step_actual, step_expected in zip(actual, expected, strict=True):
        assert_close(step_actual[0], step_expected[0])


@pytest.mark.parametrize("part", ["whole model", "language_model", "vision_tower"])
def test_train_mode_neither_reads_nor_writes_the_store(part):
    # Any module in train mode counts, not only the top one (`model.training` stays False when a part is trained)
    upstream, ours = model_pair("llava")
    store = PrefixCache(block_size=4)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[1])
    (ours if part == "whole model" else getattr(ours.model, part)).train()
    try:
        generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store)
    finally:
        ours.eval()
    assert store.stats.entries == 0 and store.stats.lookups == 0
    assert_close(first_logits(ours, prompt.inputs(), store), uncached_logits(upstream, prompt.inputs()))


def test_prefix_cache_argument_must_be_a_store():
    _, ours = model_pair("llava")
    prompt = Prompt(ours.config, [SYSTEM])
    with pytest.raises(TypeError, match="PrefixCache"):
        ours.generate(**prompt.inputs(), max_new_tokens=1, prefix_cache=True)


# -- Every cache_implementation --------------------------------------------------------------------------------------

STATIC_KINDS = ("static", "sliding_window", "offloaded_static")
CACHE_KINDS = ["dynamic", *STATIC_KINDS, "offloaded", "quantized"]


def _skip_unavailable(kind: str) -> None:
    if kind == "quantized" and importlib.util.find_spec("optimum") is None and importlib.util.find_spec("hqq") is None:
        pytest.skip("the quantized cache needs optimum-quanto or hqq, not installed")
    if kind.startswith("offloaded") and not torch.cuda.is_available():
        pytest.skip("transformers' offloaded caches prefetch on a CUDA stream: they need a GPU")


@pytest.mark.parametrize("kind", CACHE_KINDS)
@pytest.mark.parametrize("family", families_with(sampled("mainstream"), not_(has_multimodal_rope)))
def test_prefix_cache_composes_with_every_cache_implementation(family, kind):
    _skip_unavailable(kind)
    upstream, ours = model_pair(family)
    store = PrefixCache(block_size=4)
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32, 33, 34]], image_seeds=[1])
    second = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32, 33, 34, 40, 41]], image_seeds=[1])
    # A static sliding-window layer keeps only its window, so such a call stores nothing (Gemma3 has sliding layers)
    # but restores what another call stored.
    storing_kind = "dynamic" if family == "gemma3" and kind in STATIC_KINDS else kind
    generate_logits(ours, first.inputs(), max_new_tokens=2, prefix_cache=store, cache_implementation=storing_kind)
    _, actual = generate_logits(ours, second.inputs(), max_new_tokens=3, prefix_cache=store, cache_implementation=kind)
    _, expected = generate_logits(upstream, second.inputs(), max_new_tokens=3)
    assert_same_steps(actual, expected)
    if kind != "quantized":
        assert store.stats.tokens_reused > 0


def test_static_cache_with_sliding_layers_restores_but_stores_nothing():
    upstream, ours = model_pair("gemma3")
    store = PrefixCache(block_size=4)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32]], image_seeds=[1])
    _, actual = generate_logits(
        ours, prompt.inputs(), max_new_tokens=2, prefix_cache=store, cache_implementation="static"
    )
    assert store.stats.entries == 0
    _, expected = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    assert_same_steps(actual, expected)


def test_cache_implementation_from_the_checkpoint_generation_config():
    upstream, ours = model_pair("llava")
    store = PrefixCache(block_size=4)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[1])
    ours.generation_config.cache_implementation = "static"
    try:
        generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store)
        _, actual = generate_logits(ours, prompt.inputs(), max_new_tokens=2, prefix_cache=store)
    finally:
        ours.generation_config.cache_implementation = None
    _, expected = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    assert_same_steps(actual, expected)
    assert store.stats.tokens_reused > 0
