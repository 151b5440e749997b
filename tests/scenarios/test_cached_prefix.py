"""A caller's KV cache holds the start of the prompt: generation resumes from it exactly, encoding only new images.

The cache is filled by the plain transformers class (as a caller would) and may end anywhere: after text, after an
image, or inside an image's placeholder run, where only a roll-back to the image's start is exact.
"""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from conftest import model_pair
from support.caller_caches import cropped_cache, truncated_cache
from support.references import (
    SYSTEM,
    USER,
    Prompt,
    assert_close,
    assert_same_steps,
    generate_logits,
    generate_new_image_turn,
    reference_next_logits,
)
from support.registry import scenario
from vlmprep.cache.recording import record_past
from vlmprep.testing import IMAGE, VisionRunCounter


def recorded_cache_of(model, inputs: dict) -> DynamicCache:
    """KV cache of one forward over `inputs` (the upstream way a caller fills a cache).

    Past recording is on so the test itself can `crop` it, also past Gemma3's sliding window.
    """
    cache = DynamicCache(config=model.config)
    record_past(cache)
    with torch.no_grad():
        output = model(**inputs, cache=cache, use_cache=True)
    # The cache passed in is the one filled; BLIP-2's output holds it only in `language_model_outputs`.
    return cache if getattr(output, "cache", None) is None else output.cache


@scenario
def test_cached_text_prefix_then_image_turn(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, USER, IMAGE, [31, 32]])
    cache = recorded_cache_of(upstream, {"input_ids": torch.tensor([SYSTEM])})
    with VisionRunCounter(ours) as runs:
        sequences, logits = generate_logits(ours, prompt.inputs(), cache=cache)
    assert_close(logits[0], reference_next_logits(upstream, prompt))
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs())
    assert torch.equal(sequences, expected_sequences)
    assert_same_steps(logits, expected_logits)
    assert runs.calls == 1


def test_paligemma_prefix_cache_is_rolled_back_to_block_start():
    upstream, ours = model_pair("paligemma")
    prompt = Prompt(ours.config, [IMAGE, SYSTEM, USER])
    cache = recorded_cache_of(upstream, prompt.inputs(length=prompt.length - 3))
    _, logits = generate_logits(ours, prompt.inputs(), cache=cache, max_new_tokens=1)
    assert_close(logits[0], reference_next_logits(upstream, prompt))
    # Upstream cannot continue from the same cache: it fails on the cached image, or (without the image's pixels)
    # is off, because the cached prefix never saw the rest of its bidirectional block.
    cache = recorded_cache_of(upstream, prompt.inputs(length=prompt.length - 3))
    with pytest.raises(ValueError, match="do not match"):
        upstream.generate(**prompt.inputs(), cache=cache, max_new_tokens=1)
    cache = recorded_cache_of(upstream, prompt.inputs(length=prompt.length - 3))
    _, upstream_logits = generate_logits(upstream, prompt.inputs(with_pixels=False), cache=cache, max_new_tokens=1)
    assert not torch.allclose(upstream_logits[0], reference_next_logits(upstream, prompt), atol=1e-5)


# -- Image already in the cache: a chat app re-sending the conversation --------------------------------------------


@scenario
def test_image_already_in_cache_is_not_encoded(family):
    upstream, ours = model_pair(family)
    turn_1 = [SYSTEM, IMAGE, USER]
    conversation = Prompt(ours.config, [*turn_1, [40, 41, 42]], image_seeds=[7])
    turn_1_length = Prompt(ours.config, turn_1).length
    cache = recorded_cache_of(upstream, conversation.inputs(length=turn_1_length))
    with VisionRunCounter(ours) as runs:
        _, logits = generate_logits(ours, conversation.inputs(), cache=cache)
    # PaliGemma's prompt is one bidirectional prefix: turn 1's KV never saw turn 2, so the prefix is recomputed
    # (its image comes from the encoder cache when the model encoded it before, see test_encoder_cache.py). IDEFICS's
    # later tokens read the cached image through cross-attention, which no KV cache holds: it is encoded once here.
    facts = ours.vision_facts
    assert runs.calls == (1 if facts.bidirectional == "prefix" or _states_every_forward(facts) else 0)
    _, expected_logits = generate_logits(upstream, conversation.inputs())
    assert_same_steps(logits, expected_logits)


@scenario
def test_new_image_next_to_cached_image_encodes_only_the_new_one(family):
    upstream, ours = model_pair(family)
    runs = generate_new_image_turn(upstream, ours, [SYSTEM, IMAGE, USER], [7, 8], recorded_cache_of, VisionRunCounter)
    # One block over the prefix (PaliGemma) or over every image (Molmo2): the cached image is recomputed with the new
    # one; the tokens between them read the cached one through cross-attention (IDEFICS): encoded with the new one
    facts = ours.vision_facts
    recomputed = facts.bidirectional in ("prefix", "items") or _states_every_forward(facts)
    assert runs.batch_sizes == ([2] if recomputed else [1])


def _states_every_forward(facts) -> bool:
    # Cross-attention states read by every forward (IDEFICS) are in no cache: every image of the prompt is prepared
    return facts.cross_attention is not None and facts.cross_attention.every_forward


# -- Cache ending inside an image's placeholder run ------------------------------------------------------------------


def _mid_image(prompt: Prompt, model) -> int:
    # The suite's items are the first modality's: images, or the videos of a family without images
    placeholder_id = model.vision_facts.modalities[0].placeholder_id(model.config)
    positions = (prompt.input_ids[0] == placeholder_id).nonzero().flatten()
    return int(positions[len(positions) // 2])


@scenario
def test_cache_cropped_inside_image(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    cut = _mid_image(prompt, ours)
    cache = cropped_cache(upstream, prompt.inputs(), cut)
    with VisionRunCounter(ours) as runs:
        _, logits = generate_logits(ours, prompt.inputs(), cache=cache)
    assert runs.calls == 1
    _, expected_logits = generate_logits(upstream, prompt.inputs())
    assert_same_steps(logits, expected_logits)


@scenario
def test_cache_from_prompt_truncated_inside_image(family):
    """A cache computed over a prompt cut mid-image never saw the rest of the image: only a roll-back is exact."""
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    cache = truncated_cache(upstream, prompt, _mid_image(prompt, ours))
    _, logits = generate_logits(ours, prompt.inputs(), cache=cache)
    _, expected_logits = generate_logits(upstream, prompt.inputs())
    assert_same_steps(logits, expected_logits)
