"""The prefix cache with generation modes whose prompt step transformers computes over the whole prompt (issue 22).

transformers returns `output_hidden_states` / `output_attentions` for every prompt token, and assisted decoding's first
forward feeds the whole prompt (with the draft tokens) whatever the cache holds. With a stored prefix of the prompt,
such a call does not look the store up: it prefills the whole prompt, as the plain transformers class does, and still
stores its prompt and answer, which the next call reuses (under the same attention implementation: attentions run
eager, and KV of one implementation is not served to another). Every output is compared with the plain transformers class
holding the same weights (its `generate` without a cache, and one uncached forward of the prompt and answer).
"""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.references import (
    NO_SPECIAL_TOKENS,
    Prompt,
    assert_close,
    assert_same_steps,
    assert_steps_match_upstream,
    continued,
    eager_attention,
    generate_logits,
    reference_next_logits,
    uncached_logits,
)
from support.traits import families_with, sampled
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, VisionRunCounter

SYSTEM = [2, *range(10, 21)]
# Families whose second prompt resumes inside the first one's stored KV (PaliGemma's prefix grows with the prompt, so
# a stored prefix of it is never reused: the lookup has nothing to return there).
FAMILIES = families_with(sampled("mainstream"))


def stored_prefix_and_longer_prompt(ours, store: PrefixCache) -> Prompt:
    """Store a first prompt (system text, an image, user text), and return a longer prompt sharing all of it."""
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[3])
    ours.generate(**first.inputs(), max_new_tokens=1, do_sample=False, prefix_cache=store)
    assert store.stats.tokens >= first.length - 1
    return Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32, 33, 34, 30, 31, 32]], image_seeds=[3])


def assert_next_call_reuses(
    upstream, ours, store: PrefixCache, prompt: Prompt, answer: torch.Tensor, stored: bool = True
) -> None:
    """A call continuing a prompt and its answer reuses them from the store (`stored`), or at least the stored
    prefix before them, and is exact."""
    reused_before = store.stats.tokens_reused
    inputs = continued(prompt, answer.tolist())
    _, logits = generate_logits(ours, inputs, max_new_tokens=1, prefix_cache=store)
    reused = store.stats.tokens_reused - reused_before
    assert reused >= prompt.length if stored else 0 < reused < prompt.length
    assert_close(logits[0], uncached_logits(upstream, inputs))


@pytest.mark.parametrize("family", FAMILIES)
def test_hidden_states_and_attentions_with_a_stored_prefix_are_transformers_own(family):
    upstream, ours = model_pair(family)
    store = PrefixCache()
    prompt = stored_prefix_and_longer_prompt(ours, store)
    lookups = store.stats.lookups
    kwargs = {
        "max_new_tokens": 3,
        "do_sample": False,
        "return_dict_in_generate": True,
        "output_logits": True,
        "output_hidden_states": True,
        "output_attentions": True,
        **NO_SPECIAL_TOKENS,
    }
    with eager_attention(upstream, ours):
        expected = upstream.generate(**prompt.inputs(), **kwargs)
        actual = ours.generate(**prompt.inputs(), prefix_cache=store, **kwargs)

    assert store.stats.lookups == lookups  # the store was not looked up: the prompt step covers the whole prompt
    assert torch.equal(actual.sequences, expected.sequences)
    assert_same_steps(actual.logits, expected.logits)
    assert actual.hidden_states[0][-1].shape[1] == prompt.length
    assert actual.attentions[0][-1].shape[-2:] == (prompt.length, prompt.length)
    for name in ("hidden_states", "attentions"):
        for step, (ours_step, upstream_step) in enumerate(
            zip(getattr(actual, name), getattr(expected, name), strict=True)
        ):
            for ours_layer, upstream_layer in zip(ours_step, upstream_step, strict=True):
                assert ours_layer.shape == upstream_layer.shape, f"{name}, step {step}"
                assert_close(ours_layer, upstream_layer)
    with eager_attention(upstream, ours):  # stored under eager attention, served under it only
        assert_next_call_reuses(upstream, ours, store, prompt, actual.sequences[0, prompt.length :])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("assistant", ["prompt_lookup", "drop_in_assistant", "upstream_assistant"])
def test_assisted_decoding_with_a_stored_prefix_matches_transformers(family, assistant):
    upstream, ours = model_pair(family)
    store = PrefixCache()
    prompt = stored_prefix_and_longer_prompt(ours, store)
    if assistant == "prompt_lookup":
        kwargs = {"prompt_lookup_num_tokens": 3}
    else:
        kwargs = {"assistant_model": ours if assistant == "drop_in_assistant" else upstream}
    expected_ids, expected = generate_logits(upstream, prompt.inputs(), max_new_tokens=6, **NO_SPECIAL_TOKENS)
    ours.encoder_cache.clear()
    with VisionRunCounter(ours) as runs:
        ids, logits = generate_logits(
            ours, prompt.inputs(), max_new_tokens=6, prefix_cache=store, **kwargs, **NO_SPECIAL_TOKENS
        )
    assert runs.images == 1  # a drop-in assistant reads the main model's features of every image
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)
    answer = ids[0, prompt.length :]
    assert_steps_match_upstream(upstream, prompt, answer, logits)
    # Tiny models can fail here: another image moves the first step
    other = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32, 33, 34, 30, 31, 32]], image_seeds=[4])
    assert (reference_next_logits(upstream, other) - logits[0]).abs().max() > 1e-3
    # Assisted decoding crops Gemma3's sliding-window layers to their window: nothing of that call can be stored
    assert_next_call_reuses(upstream, ours, store, prompt, answer, stored=family != "gemma3")


def test_hidden_states_asked_for_but_not_returned_still_use_the_stored_prefix():
    # Without `return_dict_in_generate` transformers returns only the sequences: nothing covers the prompt step
    upstream, ours = model_pair("llava")
    store = PrefixCache()
    prompt = stored_prefix_and_longer_prompt(ours, store)
    reused = store.stats.tokens_reused
    sequences = ours.generate(
        **prompt.inputs(), max_new_tokens=3, do_sample=False, output_hidden_states=True, prefix_cache=store
    )
    assert store.stats.tokens_reused > reused
    expected = upstream.generate(**prompt.inputs(), max_new_tokens=3, do_sample=False)
    assert torch.equal(sequences, expected)
