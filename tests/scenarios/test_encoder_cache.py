"""The encoder cache inside drop-in models: an image is encoded once across calls, and never wrongly reused."""

from __future__ import annotations

import contextlib

import pytest
import torch

from conftest import FOUNDATION_FAMILIES, model_pair
from support.concurrency import run_in_threads
from support.references import (
    USER,
    Prompt,
    assert_close,
    assert_same_steps,
    eager_attention,
    encoder_runs,
    generate_logits,
    reference_next_logits,
)
from support.traits import families_with, sampled
from vlmprep import EncoderCache
from vlmprep.testing import IMAGE, VIDEO, VisionRunCounter

SYSTEM = [2, 10, 11, 12]


@pytest.fixture
def fresh_cache():
    """A fresh cache on every foundation model, restored to the default afterwards."""
    saved = {family: model_pair(family)[1].encoder_cache for family in FOUNDATION_FAMILIES}
    for family in FOUNDATION_FAMILIES:
        model_pair(family)[1].encoder_cache = EncoderCache(max_bytes=2**24)
    yield
    for family, cache in saved.items():
        model_pair(family)[1].encoder_cache = cache


@pytest.mark.parametrize("family", FOUNDATION_FAMILIES)
def test_second_call_with_the_same_image_runs_no_encoder(family, fresh_cache):
    upstream, ours = model_pair(family)
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30]], image_seeds=[1])
    same_image_other_question = Prompt(ours.config, [[2, 40, 41], IMAGE, [42, 43]], image_seeds=[1])
    with VisionRunCounter(ours) as runs:
        generate_logits(ours, first.inputs(), max_new_tokens=1)
        _, logits_again = generate_logits(ours, first.inputs(), max_new_tokens=1)
        _, logits_other = generate_logits(ours, same_image_other_question.inputs(), max_new_tokens=1)
    assert runs.batch_sizes == [1]
    assert_close(logits_again[0], reference_next_logits(upstream, first))
    assert_close(logits_other[0], reference_next_logits(upstream, same_image_other_question))
    assert ours.encoder_cache.stats.hits == 2


def test_misses_of_one_call_are_encoded_in_one_batch(fresh_cache):
    _, ours = model_pair("gemma3")
    generate_logits(ours, Prompt(ours.config, [SYSTEM, IMAGE, [30]], image_seeds=[1]).inputs(), max_new_tokens=1)
    three = Prompt(ours.config, [SYSTEM, IMAGE, [30], IMAGE, [31], IMAGE, [32]], image_seeds=[1, 2, 3])
    with VisionRunCounter(ours) as runs:
        generate_logits(ours, three.inputs(), max_new_tokens=1)
    assert runs.batch_sizes == [2]  # image 1 hit; images 2 and 3 in one call


def test_different_images_with_identical_shapes_never_hit(fresh_cache):
    upstream, ours = model_pair("llava")
    for seed in range(4):
        prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30]], image_seeds=[seed])
        with VisionRunCounter(ours) as runs:
            _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1)
        assert runs.calls == 1
        assert_close(logits[0], reference_next_logits(upstream, prompt))
    assert ours.encoder_cache.stats.hits == 0


def test_same_pixels_with_other_encoder_arguments_do_not_hit(fresh_cache):
    upstream, ours = model_pair("llava")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30]], image_seeds=[1])
    with VisionRunCounter(ours) as runs:
        for layer in (-1, -2):
            _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, vision_feature_layer=layer)
            with torch.no_grad():
                expected = upstream(**prompt.inputs(), vision_feature_layer=layer, use_cache=False).logits[:, -1]
            assert_close(logits[0], expected)
    assert runs.calls == 2
    assert not torch.allclose(expected, reference_next_logits(upstream, prompt), atol=1e-3), "the layer matters"


def test_salt_isolates_tenants(fresh_cache):
    _, ours = model_pair("gemma3")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30]], image_seeds=[1])
    with VisionRunCounter(ours) as runs:
        generate_logits(ours, prompt.inputs(), max_new_tokens=1, cache_salt="tenant-a")
        generate_logits(ours, prompt.inputs(), max_new_tokens=1, cache_salt="tenant-b")
        generate_logits(ours, prompt.inputs(), max_new_tokens=1, cache_salt="tenant-a")
    assert runs.calls == 2


@pytest.mark.parametrize("part", ["whole model", "language_model", "vision_tower"])
def test_training_mode_bypasses_the_cache(fresh_cache, part):
    # Any module in train mode counts, not only the top one (`model.training` stays False when a part is trained)
    _, ours = model_pair("gemma3")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30]], image_seeds=[1])
    (ours if part == "whole model" else getattr(ours.model, part)).train()
    try:
        with VisionRunCounter(ours) as runs:
            generate_logits(ours, prompt.inputs(), max_new_tokens=1)
            generate_logits(ours, prompt.inputs(), max_new_tokens=1)
    finally:
        ours.eval()
    assert runs.calls == 2 and len(ours.encoder_cache) == 0


def test_turning_the_cache_off_and_type_check(fresh_cache):
    _, ours = model_pair("gemma3")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30]], image_seeds=[1])
    ours.encoder_cache = None
    with VisionRunCounter(ours) as runs:
        generate_logits(ours, prompt.inputs(), max_new_tokens=1)
        generate_logits(ours, prompt.inputs(), max_new_tokens=1)
    assert runs.calls == 2
    with pytest.raises(TypeError, match="EncoderCache"):
        ours.encoder_cache = {}


def test_one_cache_shared_by_threads_and_models(fresh_cache):
    """Two models share one cache from several threads: entries never mix, every answer stays exact."""
    shared = EncoderCache(max_bytes=2**24)
    pairs = [model_pair("gemma3"), model_pair("paligemma")]
    for _, ours in pairs:
        ours.encoder_cache = shared
    expected = {}
    for index, (upstream, ours) in enumerate(pairs):
        for seed in range(3):
            prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30]], image_seeds=[seed])
            expected[index, seed] = (prompt, reference_next_logits(upstream, prompt))

    def work(index):
        _, ours = pairs[index % 2]
        for seed in [0, 1, 2, 1, 0]:
            prompt, reference = expected[index % 2, seed]
            _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1)
            assert_close(logits[0], reference)

    run_in_threads(work, 4)
    assert shared.stats.entries == 6  # 3 images x 2 models, never shared across models


def test_images_already_in_the_kv_cache_are_not_hashed(fresh_cache, monkeypatch):
    from transformers import DynamicCache

    import vlmprep.generation.encoding as encoding

    upstream, ours = model_pair("llava")
    turn_1 = [SYSTEM, IMAGE, [30]]
    conversation = Prompt(ours.config, [*turn_1, [31, 32], IMAGE, [33]], image_seeds=[1, 2])
    cache = DynamicCache(config=upstream.config)
    with torch.no_grad():
        upstream(**Prompt(ours.config, turn_1, image_seeds=[1]).inputs(), cache=cache)
    hashed = []
    original = encoding.hash_item_inputs
    monkeypatch.setattr(encoding, "hash_item_inputs", lambda inputs, **kw: hashed.append(1) or original(inputs, **kw))
    _, logits = generate_logits(ours, conversation.inputs(), max_new_tokens=1, cache=cache)
    assert len(hashed) == 1, "only the new image is hashed"
    assert_close(logits[0], reference_next_logits(upstream, conversation))


def test_deepstack_features_are_cached_with_the_image_features():
    """Qwen3-VL's deepstack features (one per tapped vision layer) come from the cache with the image features."""
    upstream, ours = model_pair("qwen3_vl")
    prompt = Prompt(ours.config, [[2, 10, 11, 12, 13, 14, 15, 16], IMAGE, [30], VIDEO, USER], image_seeds=[3, 4])
    _, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    for expected_runs in ([1, 1], []):  # the second call's image and video come from the encoder cache
        with encoder_runs(ours, encoder_cache_off=False) as runs:
            _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2, prefill_chunk_size=5)
        assert runs.batch_sizes == expected_runs
        assert_same_steps(logits, expected_logits)


@pytest.mark.parametrize("family", families_with(sampled("attention_implementations")))
def test_features_of_another_attention_implementation_are_not_served(family):
    """Features encoded under SDPA are not served to a call under eager attention, nor the reverse: the kernels round
    differently, which GLM-5-Next's sparse indexer can turn into another selection of keys (0.1 in logits, a greedy
    token off transformers' under eager attention, found by the differential test). Each call equals transformers
    under the same implementation; a repeated implementation is served from the cache."""
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, VIDEO, [30], IMAGE, USER], image_seeds=[1, 2])
    saved, ours.encoder_cache = ours.encoder_cache, EncoderCache()
    try:
        for implementation, encodes in (("sdpa", True), ("eager", True), ("eager", False), ("sdpa", False)):
            attention = eager_attention(upstream, ours) if implementation == "eager" else contextlib.nullcontext()
            with attention:
                _, expected = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
                with VisionRunCounter(ours) as runs:
                    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2)
            assert (runs.calls > 0) == encodes, (implementation, runs.calls)
            assert_same_steps(logits, expected)
    finally:
        ours.encoder_cache = saved
