"""ERNIE 4.5 VL MoE beyond the conformance matrix: assisted decoding, whose first forward holds the prompt and the
draft tokens, sends every token to the experts of its own type (`moe_mm_token_type_ids`), as the plain class's
one-token decoding does (the drafts are text), also after a returned cache and with the prefix store."""

from __future__ import annotations

import torch

from conftest import model_pair
from support.references import NO_SPECIAL_TOKENS, Prompt, assert_close, continued, greedy_output
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE

# "5 6" comes back at the end: prompt lookup drafts "7 8" and the image's start token after it
REPEATING_TEXT = [[5, 6, 7, 8], IMAGE, [9, 5, 6]]


def greedy(model, inputs: dict, max_new_tokens: int, **kwargs):
    return greedy_output(model, inputs, max_new_tokens, **NO_SPECIAL_TOKENS, **kwargs)


def first_forward_lengths(model):
    """Records the number of ids each forward of `model` gets (the first of an assisted call: prompt and drafts)."""
    lengths = []
    handle = model.register_forward_pre_hook(
        lambda _, args, kwargs: lengths.append(kwargs["input_ids"].shape[-1]), with_kwargs=True
    )
    return lengths, handle


def assert_steps_match_uncached_forwards(upstream, prompt: Prompt, output) -> None:
    """Every step's logits against one uncached forward of the plain class over the prompt and the answer so far."""
    answer = output.sequences[0, prompt.length : -1].tolist()
    with torch.no_grad():
        expected = upstream(**continued(prompt, answer), use_cache=False).logits[0, prompt.length - 1 :]
    for step, logits in enumerate(output.logits):
        assert_close(logits[0], expected[step])


def test_the_expert_routing_by_token_type_changes_the_logits():
    """The tiny model can fail: a token sent to the other modality's experts changes the logits."""
    upstream, _ = model_pair("ernie4_5_vl_moe")
    inputs = Prompt(upstream.config, REPEATING_TEXT, image_seeds=[0]).inputs()
    shifted = {**inputs, "moe_mm_token_type_ids": inputs["moe_mm_token_type_ids"].roll(1, dims=-1)}
    with torch.no_grad():
        logits = upstream(**inputs, use_cache=False).logits[:, -1]
        assert (upstream(**shifted, use_cache=False).logits[:, -1] - logits).abs().max() > 1e-4


def test_prompt_lookup_drafts_are_text_tokens():
    upstream, ours = model_pair("ernie4_5_vl_moe")
    prompt = Prompt(upstream.config, REPEATING_TEXT, image_seeds=[0])
    lengths, handle = first_forward_lengths(ours)
    try:
        # Upstream's own assisted call fails here (the drafts get no token type: an `IndexError` in its MoE)
        output = greedy(ours, prompt.inputs(), 3, prompt_lookup_num_tokens=3)
    finally:
        handle.remove()
    assert lengths[0] > prompt.length, "the first forward must hold drafts"
    expected = greedy(upstream, prompt.inputs(), 3)
    assert torch.equal(output.sequences, expected.sequences)
    assert_steps_match_uncached_forwards(upstream, prompt, output)


def test_prompt_lookup_after_a_returned_cache_with_the_prefix_store():
    """The second turn (with an image) continues the first call's cache: its first forward holds the new tokens and
    the drafts, whose token types were cut from the prompt's end (every token typed as its neighbour's: no error)."""
    upstream, ours = model_pair("ernie4_5_vl_moe")
    store = PrefixCache()
    first = Prompt(upstream.config, [[5, 6, 7, 8]])
    turn_1 = greedy(ours, first.inputs(), 1, prompt_lookup_num_tokens=3, prefix_cache=store)
    answer = turn_1.sequences[0, first.length :].tolist()
    second = Prompt(upstream.config, [[5, 6, 7, 8], answer, IMAGE, [9, 5, 6]], image_seeds=[0])
    lengths, handle = first_forward_lengths(ours)
    try:
        output = greedy(ours, second.inputs(), 3, prompt_lookup_num_tokens=3, prefix_cache=store, cache=turn_1.cache)
    finally:
        handle.remove()
    assert lengths[0] > second.length - first.length - 1, "the first forward must hold drafts"
    with torch.no_grad():
        assert_close(output.logits[0], upstream(**second.inputs(), use_cache=False).logits[:, -1])
    assert_steps_match_uncached_forwards(upstream, second, output)
