"""Decoding after a prompt that ends on an image: the answer's positions follow the model's own `get_rope_index`.

With multimodal rope, text after an item starts past the item's largest position on every rope row. transformers'
`generate` numbers each decoded token as the last position + 1 on each row: the same where the prompt's last token is
text (Qwen-VL's `<|vision_end|>` is placed as text), not where it is a corner of an item's canvas (MiniCPM-V 4.7's
`</image>`). Every step of the drop-in's answer, and a cache holding it continued, equals one uncached forward of the
plain transformers class over the whole sequence.
"""

from __future__ import annotations

import pytest

from conftest import model_pair
from support.references import (
    NO_SPECIAL_TOKENS,
    Prompt,
    assert_close,
    assert_steps_match_upstream,
    continued,
    generate_logits,
    uncached_logits,
)
from support.traits import families_with, has_multimodal_rope
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, VIDEO, PrefillCounter

# The registered families with multimodal rope (their positions from `get_rope_index` over the whole prompt)
MULTIMODAL_ROPE_FAMILIES = families_with(has_multimodal_rope)


@pytest.mark.parametrize("family", MULTIMODAL_ROPE_FAMILIES)
def test_each_step_after_a_prompt_that_ends_on_an_image_is_exact(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [[2, 10], IMAGE], image_seeds=[0])  # ends on the image's last token (end marker)
    sequences, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=3, **NO_SPECIAL_TOKENS)
    assert_steps_match_upstream(upstream, prompt, sequences[0, prompt.length :], logits)


@pytest.mark.parametrize("medium", [IMAGE, VIDEO], ids=["image", "video"])
def test_each_step_after_a_prompt_that_ends_on_sliced_image_or_a_video_is_exact(medium):
    # Seed 2 draws an image with two slices: the prompt ends on the last slice's `</slice>`, inside the canvas
    upstream, ours = model_pair("minicpmv4_7")
    prompt = Prompt(ours.config, [[2, 10], medium], image_seeds=[2])
    sequences, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=3, **NO_SPECIAL_TOKENS)
    assert_steps_match_upstream(upstream, prompt, sequences[0, prompt.length :], logits)


@pytest.mark.parametrize(("family", "seed"), [("minicpmv4_7", 0), ("minicpmv4_7", 2), ("qwen2_vl", 0)])
def test_continuing_after_a_prompt_that_ends_on_an_image_is_exact(family, seed):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [IMAGE], image_seeds=[seed])
    first = ours.generate(
        **prompt.inputs(), max_new_tokens=2, do_sample=False, return_dict_in_generate=True, **NO_SPECIAL_TOKENS
    )
    # The prompt and the first answer token in the cache, decoded by the drop-in; the next turn's text after it
    conversation = continued(prompt, [*first.sequences[0, prompt.length :].tolist(), 3])
    _, logits = generate_logits(ours, conversation, max_new_tokens=1, cache=first.cache)
    assert_close(logits[0], uncached_logits(upstream, conversation))


def test_upstream_generate_numbers_the_answer_after_a_canvas_differently():
    """Why the drop-in's decode positions differ from upstream's `generate` here (docs/migration.md)."""
    upstream, ours = model_pair("minicpmv4_7")
    prompt = Prompt(ours.config, [[2, 10], IMAGE], image_seeds=[0])
    sequences, logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2, **NO_SPECIAL_TOKENS)
    with pytest.raises(AssertionError, match="step 1"):
        assert_steps_match_upstream(upstream, prompt, sequences[0, prompt.length :], logits)


def test_an_answer_after_an_image_is_resumed_from_the_prefix_cache_exactly():
    # The store keys the answer's tokens with the positions decoding gave them, the next turn's prompt with those of
    # `get_rope_index`: equal, so the next turn resumes after the stored answer, not after the image
    upstream, ours = model_pair("minicpmv4_7")
    prompt = Prompt(ours.config, [[2, 10], IMAGE], image_seeds=[2])
    store = PrefixCache(max_bytes=2**26)
    sequences, _ = generate_logits(ours, prompt.inputs(), max_new_tokens=3, prefix_cache=store, **NO_SPECIAL_TOKENS)
    conversation = continued(prompt, [*sequences[0, prompt.length :].tolist(), 3])
    with PrefillCounter(ours) as prefill:
        _, logits = generate_logits(ours, conversation, max_new_tokens=1, prefix_cache=store)
    assert prefill.prefilled(new_tokens=1) == 2, prefill.lengths  # the answer's last token and the new text
    assert_close(logits[0], uncached_logits(upstream, conversation))
