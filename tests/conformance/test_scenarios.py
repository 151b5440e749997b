"""Foundation scenarios for Gemma3, PaliGemma and LLaVA: parity with transformers and exact cached generation."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from conftest import model_pair
from family_registry import families_for
from helpers import (
    NO_SPECIAL_TOKENS,
    Prompt,
    assert_batch_matches_upstream,
    assert_close,
    collate,
    generate_logits,
    reference_next_logits,
    truncated_cache,
)
from vlmprep.testing import IMAGE, VisionRunCounter

SYSTEM = [2, 10, 11, 12, 13, 14, 15, 16]
USER = [20, 21, 22]


def cache_of(model, inputs: dict) -> DynamicCache:
    """KV cache of one forward over `inputs` (the upstream way a caller fills a cache).

    Past recording is on so the test itself can `crop` it, also past Gemma3's sliding window.
    """
    cache = DynamicCache(config=model.config)
    cache.activate_past_recording()
    with torch.no_grad():
        return model(**inputs, cache=cache, use_cache=True).cache


# -- 1. Plain generate: same tokens and logits as transformers; one vision run per call ---------------------------

GENERATION_MODES = {
    "greedy": {"do_sample": False},
    "sample": {"do_sample": True, "top_k": 5},
    "beams": {"do_sample": False, "num_beams": 3},
    "return_two": {"do_sample": True, "num_return_sequences": 2},
}


@pytest.mark.parametrize("mode", list(GENERATION_MODES))
@pytest.mark.parametrize("family", families_for("generate_matches_transformers"))
def test_generate_matches_transformers(family, mode):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, IMAGE, [30]])
    kwargs = dict(max_new_tokens=4, output_logits=True, return_dict_in_generate=True, **GENERATION_MODES[mode])
    torch.manual_seed(1)
    expected = upstream.generate(**prompt.inputs(), **kwargs)
    torch.manual_seed(1)
    with VisionRunCounter(ours) as runs:
        actual = ours.generate(**prompt.inputs(), **kwargs)
    assert torch.equal(actual.sequences, expected.sequences)
    for step_actual, step_expected in zip(actual.logits, expected.logits, strict=True):
        assert_close(step_actual, step_expected)
    assert runs.calls == 1 and runs.images == 2


# -- 2. Cached text prefix (the seed's case) ---------------------------------------------------------------------


@pytest.mark.parametrize("family", families_for("cached_text_prefix_then_image_turn"))
def test_cached_text_prefix_then_image_turn(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, USER, IMAGE, [31, 32]])
    cache = cache_of(upstream, {"input_ids": torch.tensor([SYSTEM])})
    with VisionRunCounter(ours) as runs:
        sequences, logits = generate_logits(ours, prompt.inputs(), cache=cache)
    assert_close(logits[0], reference_next_logits(upstream, prompt))
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs())
    assert torch.equal(sequences, expected_sequences)
    for step_actual, step_expected in zip(logits, expected_logits, strict=True):
        assert_close(step_actual, step_expected)
    assert runs.calls == 1


def test_paligemma_prefix_cache_is_rolled_back_to_block_start():
    upstream, ours = model_pair("paligemma")
    prompt = Prompt(ours.config, [IMAGE, SYSTEM, USER])
    cache = cache_of(upstream, prompt.inputs(length=prompt.length - 3))
    _, logits = generate_logits(ours, prompt.inputs(), cache=cache, max_new_tokens=1)
    assert_close(logits[0], reference_next_logits(upstream, prompt))
    # Upstream cannot continue from the same cache: it fails on the cached image, or (without the image's pixels)
    # is off, because the cached prefix never saw the rest of its bidirectional block.
    cache = cache_of(upstream, prompt.inputs(length=prompt.length - 3))
    with pytest.raises(ValueError, match="do not match"):
        upstream.generate(**prompt.inputs(), cache=cache, max_new_tokens=1)
    cache = cache_of(upstream, prompt.inputs(length=prompt.length - 3))
    _, upstream_logits = generate_logits(upstream, prompt.inputs(with_pixels=False), cache=cache, max_new_tokens=1)
    assert not torch.allclose(upstream_logits[0], reference_next_logits(upstream, prompt), atol=1e-5)


# -- 3. Image already in the cache: a chat app re-sending the conversation --------------------------------------


@pytest.mark.parametrize("family", families_for("image_already_in_cache_is_not_encoded"))
def test_image_already_in_cache_is_not_encoded(family):
    upstream, ours = model_pair(family)
    turn_1 = [SYSTEM, IMAGE, USER]
    conversation = Prompt(ours.config, [*turn_1, [40, 41, 42]], image_seeds=[7])
    turn_1_length = Prompt(ours.config, turn_1).length
    cache = cache_of(upstream, conversation.inputs(length=turn_1_length))
    with VisionRunCounter(ours) as runs:
        _, logits = generate_logits(ours, conversation.inputs(), cache=cache)
    # PaliGemma's prompt is one bidirectional prefix: turn 1's KV never saw turn 2, so the prefix is recomputed
    # (its image comes from the encoder cache when the model encoded it before, see test_encoder_cache_models).
    assert runs.calls == (1 if ours.vision_facts.bidirectional == "prefix" else 0)
    _, expected_logits = generate_logits(upstream, conversation.inputs())
    for step_actual, step_expected in zip(logits, expected_logits, strict=True):
        assert_close(step_actual, step_expected)


@pytest.mark.parametrize("family", families_for("new_image_next_to_cached_image_encodes_only_the_new_one"))
def test_new_image_next_to_cached_image_encodes_only_the_new_one(family):
    upstream, ours = model_pair(family)
    turn_1 = [SYSTEM, IMAGE, USER]
    conversation = Prompt(ours.config, [*turn_1, [40, 41], IMAGE, [42]], image_seeds=[7, 8])
    turn_1_prompt = Prompt(ours.config, turn_1, image_seeds=[7])
    cache = cache_of(upstream, turn_1_prompt.inputs())
    with VisionRunCounter(ours) as runs:
        _, logits = generate_logits(ours, conversation.inputs(), cache=cache)
    assert runs.batch_sizes == ([2] if ours.vision_facts.bidirectional == "prefix" else [1])
    _, expected_logits = generate_logits(upstream, conversation.inputs())
    for step_actual, step_expected in zip(logits, expected_logits, strict=True):
        assert_close(step_actual, step_expected)


# -- 4. Cache ending inside an image's placeholder run ------------------------------------------------------------


def _mid_image(prompt: Prompt, placeholder_id: int) -> int:
    positions = (prompt.input_ids[0] == placeholder_id).nonzero().flatten()
    return int(positions[len(positions) // 2])


@pytest.mark.parametrize("family", families_for("cache_cropped_inside_image"))
def test_cache_cropped_inside_image(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    cut = _mid_image(prompt, ours.config.image_token_id)
    cache = cache_of(upstream, prompt.inputs())
    cache.crop(cut - prompt.length)
    with VisionRunCounter(ours) as runs:
        _, logits = generate_logits(ours, prompt.inputs(), cache=cache)
    assert runs.calls == 1
    _, expected_logits = generate_logits(upstream, prompt.inputs())
    for step_actual, step_expected in zip(logits, expected_logits, strict=True):
        assert_close(step_actual, step_expected)


@pytest.mark.parametrize("family", families_for("cache_from_prompt_truncated_inside_image"))
def test_cache_from_prompt_truncated_inside_image(family):
    """A cache computed over a prompt cut mid-image never saw the rest of the image: only a roll-back is exact."""
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    cache = truncated_cache(upstream, prompt, _mid_image(prompt, ours.config.image_token_id))
    _, logits = generate_logits(ours, prompt.inputs(), cache=cache)
    _, expected_logits = generate_logits(upstream, prompt.inputs())
    for step_actual, step_expected in zip(logits, expected_logits, strict=True):
        assert_close(step_actual, step_expected)


# -- 5. Batch with different image counts, left-padded ------------------------------------------------------------


@pytest.mark.parametrize("family", families_for("left_padded_batch_matches_solo_runs"))
def test_left_padded_batch_matches_solo_runs(family):
    """Each row of the batch equals transformers on that row's prompt alone (uncached forwards), one vision run."""
    upstream, ours = model_pair(family)
    one = Prompt(ours.config, [SYSTEM, IMAGE, USER], image_seeds=[3])
    two = Prompt(ours.config, [[2, 50], IMAGE, [51], IMAGE, [52, 53]], image_seeds=[4, 5])
    batch = collate([one, two], ours.generation_config.pad_token_id)
    with VisionRunCounter(ours) as runs:
        sequences, logits = generate_logits(ours, batch, max_new_tokens=2, **NO_SPECIAL_TOKENS)
    assert runs.calls == 1 and runs.images == 3
    assert_batch_matches_upstream(upstream, [one, two], sequences, logits)


# -- 7. Gemma3 without token_type_ids --------------------------------------------------------------------------------


def test_gemma3_derives_token_type_ids():
    upstream, ours = model_pair("gemma3")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    inputs = prompt.inputs()
    inputs.pop("token_type_ids")
    _, logits = generate_logits(ours, inputs, max_new_tokens=1)
    reference = reference_next_logits(upstream, prompt)
    assert_close(logits[0], reference)
    _, upstream_logits = generate_logits(upstream, inputs, max_new_tokens=1)
    assert not torch.allclose(upstream_logits[0], reference, atol=1e-4), "upstream drops the bidirectional mask"


@pytest.mark.parametrize("family", families_for("interleaved_requests_share_no_state"))
def test_interleaved_requests_share_no_state(family):
    """A turn 1, B turn 1, then A turn 2 from A's cache: positions and features come from A's prompt and cache."""
    upstream, ours = model_pair(family)
    turn_1 = [SYSTEM, IMAGE, USER]
    a_turn_1 = Prompt(ours.config, turn_1, image_seeds=[11])
    a_turn_2 = Prompt(ours.config, [*turn_1, [40, 41], IMAGE, [42]], image_seeds=[11, 13])
    b_turn_1 = Prompt(ours.config, [[2, 60], IMAGE, [61, 62], IMAGE, [63]], image_seeds=[12, 14])
    a_cache = DynamicCache(config=ours.config)
    generate_logits(ours, a_turn_1.inputs(), cache=a_cache, max_new_tokens=1)
    assert a_cache.get_seq_length() == a_turn_1.length  # one new token: prefill only, the cache holds the prompt
    generate_logits(ours, b_turn_1.inputs())
    _, logits = generate_logits(ours, a_turn_2.inputs(), cache=a_cache)
    _, expected_logits = generate_logits(upstream, a_turn_2.inputs())
    for step_actual, step_expected in zip(logits, expected_logits, strict=True):
        assert_close(step_actual, step_expected)


@pytest.mark.parametrize("family", families_for("save_pretrained_loads_in_transformers"))
def test_save_pretrained_loads_in_transformers(family, tmp_path):
    """A drop-in's checkpoint is a transformers checkpoint: no missing or unexpected keys, same logits."""
    upstream, ours = model_pair(family)
    ours.save_pretrained(tmp_path)
    reloaded, info = type(upstream).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    with torch.no_grad():
        expected = upstream(**prompt.inputs()).logits
        actual = reloaded.eval()(**prompt.inputs()).logits
    assert_close(actual, expected)
