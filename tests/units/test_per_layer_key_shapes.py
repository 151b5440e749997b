"""Decoders whose layers cache keys of different shapes, against the plain class: Gemma 4's full-attention layers have
their own head dimension (every real one: 256 and 512), Dots 3 Note's sliding layers their own latent width.

Such a config is heterogeneous (transformers' `per_layer_config`) and raises on a global `head_dim` (`kv_lora_rank`)
read, which the drop-in's check of a caller's cache used to do: any `generate` given a cache (a continuation, the
drop-in as an assistant model) failed where the plain class continues. A cache of another model is still refused,
layer by layer. The conformance scenarios run both tiny configs through every cached path.
"""

from __future__ import annotations

import copy

import pytest
import torch
import transformers

import vlmprep
from conftest import model_pair
from support.references import NO_SPECIAL_TOKENS, Prompt, assert_close, assert_same_steps, greedy_output
from vlmprep.generation.validation import cached_key_shapes
from vlmprep.testing import AUDIO, IMAGE, tiny_config, tiny_model
from vlmprep.testing.configs import tiny_gemma4_config

TURN_1 = [[3, 4, 5], IMAGE, [6], AUDIO, [7, 8]]
_KV_SHARED_PAIR: list = []


def greedy(model, inputs: dict, max_new_tokens: int = 3, **kwargs):
    return greedy_output(model, inputs, max_new_tokens, **NO_SPECIAL_TOKENS, **kwargs)


def kv_shared_config() -> transformers.Gemma4Config:
    """Four decoder layers whose last two read the first two's KV (E2B/E4B's KV sharing), the full-attention layers
    with their own head dimension and their own key-value heads (`attention_k_eq_v`, as the 31B's)."""
    config = tiny_gemma4_config().to_dict()
    text = {key: value for key, value in config["text_config"].items() if key != "per_layer_config"}
    text.update(
        num_hidden_layers=4,
        layer_types=["sliding_attention", "full_attention"] * 2,
        num_kv_shared_layers=2,
        global_head_dim=32,
        attention_k_eq_v=True,
        num_global_key_value_heads=2,
    )
    return transformers.Gemma4Config(**{**config, "text_config": text})


def kv_shared_pair():
    """(plain class, drop-in) of `kv_shared_config`, same weights."""
    if not _KV_SHARED_PAIR:
        upstream = tiny_model(transformers.Gemma4ForConditionalGeneration, kv_shared_config()).eval()
        ours = vlmprep.Gemma4ForConditionalGeneration(upstream.config).eval()
        ours.load_state_dict(upstream.state_dict())
        _KV_SHARED_PAIR.extend((upstream, ours))
    return tuple(_KV_SHARED_PAIR)


def returned_cache(upstream, prompt: Prompt):
    """The plain class's cache after a first turn (its prompt and a one-token answer), and that answer."""
    first = greedy(upstream, prompt.inputs(), 1)
    return first.cache, first.sequences[0, prompt.length :].tolist()


def test_the_tiny_configs_have_per_layer_key_shapes():
    # As the released configs: the suite's cached paths fail where a key shape is read globally
    text = tiny_config("gemma4").get_text_config(decoder=True)
    assert text.per_layer_attributes == {"head_dim"}
    assert cached_key_shapes(text) == [(1, 16), (1, 32)]
    text = tiny_config("dots3_note").get_text_config(decoder=True)
    assert text.per_layer_attributes == {"kv_lora_rank"}
    assert cached_key_shapes(text) == [(1, 16), (1, 8)]
    shared = kv_shared_config().get_text_config(decoder=True)
    assert cached_key_shapes(shared) == [(1, 16), (2, 32), (1, 16), (2, 32)]
    # The cache really stores them: the shared layers hold nothing (they read the first two's KV)
    upstream, _ = kv_shared_pair()
    cache, _ = returned_cache(upstream, Prompt(upstream.config, [[3, 4, 5]]))
    held = [None if layer.keys is None else tuple(layer.keys.shape) for layer in cache.layers]
    assert held == [(1, 1, 3, 16), (1, 2, 3, 32), None, None]


@pytest.mark.parametrize("pair", [lambda: model_pair("gemma4"), kv_shared_pair], ids=["tiny", "kv_shared"])
def test_continuing_a_returned_cache_equals_the_plain_class(pair):
    upstream, ours = pair()
    turn_1 = Prompt(upstream.config, TURN_1, image_seeds=[0, 1])
    cache, answer = returned_cache(upstream, turn_1)
    conversation = Prompt(upstream.config, [*TURN_1[:-1], [7, 8, *answer, 9], IMAGE, [10]], image_seeds=[0, 1, 2])
    output = greedy(ours, conversation.inputs(), cache=copy.deepcopy(cache))
    expected = greedy(upstream, conversation.inputs())  # the plain class, the whole conversation recomputed
    assert torch.equal(output.sequences, expected.sequences)
    assert_same_steps(output.logits, expected.logits)


def test_continuing_text_with_a_returned_cache_as_the_plain_class_does():
    # Without items the plain class continues from a cache too: tokens and logits of both from the same cache
    upstream, ours = model_pair("gemma4")
    first = Prompt(upstream.config, [[3, 4, 5, 6, 7, 8]])
    cache, answer = returned_cache(upstream, first)
    second = Prompt(upstream.config, [[3, 4, 5, 6, 7, 8, *answer, 9, 10]])
    output = greedy(ours, second.inputs(), cache=copy.deepcopy(cache))
    expected = greedy(upstream, second.inputs(), cache=copy.deepcopy(cache))
    assert torch.equal(output.sequences, expected.sequences)
    assert_same_steps(output.logits, expected.logits)


@pytest.mark.parametrize("pair", [lambda: model_pair("gemma4"), kv_shared_pair], ids=["tiny", "kv_shared"])
def test_the_drop_in_as_its_own_assistant_equals_plain_greedy(pair):
    # transformers' test_assisted_decoding_matches_greedy_search: the assistant is given the main model's cache
    upstream, ours = pair()
    prompt = Prompt(upstream.config, TURN_1, image_seeds=[0, 1])
    output = greedy(ours, prompt.inputs(), 4, assistant_model=ours)
    expected = greedy(upstream, prompt.inputs(), 4)
    assert torch.equal(output.sequences, expected.sequences)
    assert_same_steps(output.logits, expected.logits)


def test_a_cache_whose_full_attention_layer_has_the_sliding_head_dim_is_refused():
    # A Gemma 4 of the same layers but one head dimension: right layer count, wrong keys in the full-attention layer
    upstream, ours = model_pair("gemma4")
    other = tiny_model(transformers.Gemma4ForConditionalGeneration, tiny_gemma4_config(global_head_dim=16)).eval()
    prompt = Prompt(upstream.config, [[3, 4, 5, 6, 7, 8]])
    cache, answer = returned_cache(other, prompt)
    second = Prompt(upstream.config, [[3, 4, 5, 6, 7, 8, *answer, 9]])
    with pytest.raises(
        ValueError, match=r"Cache layer 1 .* expects heads=1, head_dim=32 in that layer: .*another model"
    ):
        greedy(ours, second.inputs(), cache=cache)
    # The model stays exact after the refusal
    good_cache, _ = returned_cache(upstream, prompt)
    output = greedy(ours, second.inputs(), 1, cache=good_cache)
    with torch.no_grad():
        reference = upstream(**second.inputs(), use_cache=False).logits[:, -1]
    assert_close(output.logits[0], reference)
