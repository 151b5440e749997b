"""`vlmprep.generation.assisted`: which calls are assisted, and which first forwards it changes."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import DynamicCache, GenerationConfig
from transformers.cache_utils import LinearAttentionCacheLayerMixin

from conftest import model_pair
from support.caller_caches import cropped_cache
from support.references import SYSTEM, USER, Prompt, assert_same_steps, generate_logits
from support.registry import FAMILY_CASES
from support.traits import families_with, has_convolution_state_only, has_recurrent_state, sampled
from vlmprep.generation import VisionFacts
from vlmprep.generation.assisted import (
    assistant_model_of,
    first_forward_after_cache,
    is_assisted,
    recurrent_layer_types,
    type_draft_tokens_as_generated,
)
from vlmprep.generation.prepared import PlannedEncoderOutputs, PreparedItems
from vlmprep.testing import IMAGE


def _planned(end: int) -> PlannedEncoderOutputs:
    prepared = PreparedItems(spans=[], features={}, intervals=[], resume_point=0, offset=0, as_list=False)
    return PlannedEncoderOutputs(prepared, end)


def test_assistant_model_is_found_by_keyword_and_by_position():
    assistant = object()
    assert assistant_model_of((), {"assistant_model": assistant}) is assistant
    assert assistant_model_of((None, None, None, None, None, None, assistant), {}) is assistant
    assert assistant_model_of((torch.ones(1, 2),), {"max_new_tokens": 2}) is None


def test_assisted_calls():
    assert not is_assisted(GenerationConfig())
    assert is_assisted(GenerationConfig(), assistant_given=True)
    assert is_assisted(GenerationConfig(prompt_lookup_num_tokens=3))
    config = GenerationConfig()
    config.is_assistant = True
    assert is_assisted(config)


def test_drafts_after_the_prompt_get_the_generated_token_type():
    ids = torch.arange(6)[None]  # a 4-token prompt, then 2 drafts
    token_types = torch.tensor([[0, 0, 0, 0, 0, 0]])  # a PaliGemma prefix, drafts typed as it by upstream
    kwargs = {"is_first_iteration": True, "mm_encoder_outputs": _planned(4), "token_type_ids": token_types}
    typed = type_draft_tokens_as_generated(VisionFacts(bidirectional="prefix"), ids, kwargs)
    assert typed["token_type_ids"].tolist() == [[0, 0, 0, 0, 1, 1]]
    assert token_types.tolist() == [[0] * 6]  # the caller's tensor is never written to
    image_types = {
        **kwargs,
        "token_type_ids": torch.tensor([[0, 1, 1, 1, 1, 1]]),
    }  # a Gemma3 prompt ending in an image
    typed = type_draft_tokens_as_generated(VisionFacts(bidirectional="image"), ids, image_types)
    assert typed["token_type_ids"].tolist() == [[0, 1, 1, 1, 0, 0]]
    # No drafts, a later forward, or a causal family's `token_type_ids`: unchanged
    for facts, forward_ids, changed in (
        (VisionFacts(bidirectional="prefix"), ids[:, :4], {"token_type_ids": token_types[:, :4]}),
        (VisionFacts(bidirectional="prefix"), ids, {"is_first_iteration": False}),
        (VisionFacts(), ids, {}),
    ):
        assert type_draft_tokens_as_generated(facts, forward_ids, {**kwargs, **changed}) == {**kwargs, **changed}


def test_token_types_upstream_does_not_extend_get_the_drafts_typed_as_text():
    """`mm_token_type_ids` and `moe_mm_token_type_ids` end with the prompt (upstream appends nothing for drafts, then
    cuts them from their end): the drafts are appended as text, so each prompt token keeps its own type."""
    ids = torch.arange(7)[None]  # a 5-token prompt ending in an image's end token, then 2 drafts
    kwargs = {
        "is_first_iteration": True,
        "mm_encoder_outputs": _planned(5),
        "mm_token_type_ids": torch.tensor([[0, 0, 1, 1, 0]]),
        "moe_mm_token_type_ids": torch.tensor([[0, 1, 1, 1, 1]]),
    }
    facts = VisionFacts(token_type_key="mm_token_type_ids")
    typed = type_draft_tokens_as_generated(facts, ids, kwargs)
    assert typed["mm_token_type_ids"].tolist() == [[0, 0, 1, 1, 0, 0, 0]]
    assert typed["moe_mm_token_type_ids"].tolist() == [[0, 1, 1, 1, 1, 0, 0]]
    assert kwargs["moe_mm_token_type_ids"].shape[-1] == 5  # the caller's tensors are kept
    assert type_draft_tokens_as_generated(facts, ids[:, :5], kwargs) == kwargs  # no drafts


def test_first_forward_after_a_cache_feeds_only_the_new_tokens():
    cache = DynamicCache()
    cache.update(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4), 0)
    ids = torch.arange(7)[None]  # a 5-token prompt and 2 drafts, 3 of them cached
    kwargs = {"is_first_iteration": True, "mm_encoder_outputs": _planned(5), "cache": cache}
    assert first_forward_after_cache(ids, kwargs)["next_sequence_length"] == 4
    assert "next_sequence_length" not in first_forward_after_cache(ids, {**kwargs, "cache": DynamicCache()})
    assert first_forward_after_cache(ids, {**kwargs, "next_sequence_length": 1})["next_sequence_length"] == 1
    assert "next_sequence_length" not in first_forward_after_cache(ids, {**kwargs, "is_first_iteration": False})


def test_hidden_states_of_a_first_forward_cut_after_a_cache_are_refused():
    """transformers splits the first assisted forward's hidden states and attentions as if it covered the whole prompt:
    5.25 fails on a forward that runs the tokens after a cache only (5.24 misplaces them). Uncut forwards pass."""
    cache = DynamicCache()
    cache.update(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4), 0)
    ids = torch.arange(7)[None]  # a 5-token prompt and 2 drafts, 3 of them cached
    kwargs = {"is_first_iteration": True, "mm_encoder_outputs": _planned(5), "cache": cache}
    for output in ("output_hidden_states", "output_attentions"):
        with pytest.raises(ValueError, match="cache holding 3 tokens of the prompt cannot return hidden states"):
            first_forward_after_cache(ids, {**kwargs, output: True})
        assert "next_sequence_length" not in first_forward_after_cache(ids, {**kwargs, output: True, "cache": None})


@pytest.mark.parametrize("assistant", ["prompt_lookup", "upstream_assistant"])
def test_assisted_hidden_states_after_a_callers_cache_are_refused_clearly(assistant):
    """transformers 5.25 fails with a bare "Could not find a (batch_size, seq_len) pair" there; the drop-in names why
    and the way out, which gives transformers' greedy answer."""
    upstream, ours = model_pair("llava")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, SYSTEM[:4]])
    kwargs = {"prompt_lookup_num_tokens": 3} if assistant == "prompt_lookup" else {"assistant_model": upstream}
    cache = cropped_cache(upstream, prompt.inputs(), 3)
    with pytest.raises(ValueError, match="cannot return hidden states or attentions.*Pass no `cache`"):
        generate_logits(ours, prompt.inputs(), 4, cache=cache, output_hidden_states=True, **kwargs)
    expected_ids, expected = generate_logits(upstream, prompt.inputs(), 4)
    ids, logits = generate_logits(
        ours, prompt.inputs(), 4, cache=cropped_cache(upstream, prompt.inputs(), 3), **kwargs
    )
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)


@pytest.mark.parametrize("family", families_with(sampled("drafted_placeholder")))
def test_a_drafted_placeholder_is_refused_with_a_way_out(family):
    """Prompt lookup copies the image's first tokens after the text that comes back at the prompt's end: upstream
    fails with a bare count mismatch; the drop-in names the token and the way out, which then matches upstream."""
    upstream, ours = model_pair(family)
    inputs = Prompt(ours.config, [[5, 6], IMAGE, [9, 5, 6]], image_seeds=[0]).inputs()
    placeholder = ours.config.image_token_id
    with pytest.raises(ValueError, match=rf"drafted the image placeholder token {placeholder}.*suppress_tokens"):
        ours.generate(**inputs, max_new_tokens=2, do_sample=False, prompt_lookup_num_tokens=3)
    suppressed = {"max_new_tokens": 2, "do_sample": False, "suppress_tokens": [placeholder]}
    actual = ours.generate(**inputs, prompt_lookup_num_tokens=3, **suppressed)
    assert torch.equal(actual, upstream.generate(**inputs, **suppressed))


# -- Assisted decoding on decoders with a state: greedy decoding's answer, or a clear refusal ------------------------

# Gated DeltaNet (Qwen3.5), Mamba-2 (Nemotron-H Omni), KDA (GLM-5-Next): a recurrent state that only moves forward.
RECURRENT_FAMILIES = families_with(has_recurrent_state)
# Short convolutions (LFM2-VL), attention plus a short convolution (Inkling 2): a window that `crop` cuts back.
CONVOLUTION_FAMILIES = families_with(has_convolution_state_only)


def _assistant(upstream, kind: str, refused: bool):
    # A transformers copy with other weights drafts tokens the main model rejects: the cache is rolled back
    if kind == "prompt_lookup":
        return {"prompt_lookup_num_tokens": 3}
    if kind == "drop_in_assistant":
        return {"assistant_model": model_pair(upstream.config.model_type)[1]}
    if refused:  # refused before any draft
        return {"assistant_model": upstream}
    other, generator = copy.deepcopy(upstream), torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator))
    return {"assistant_model": other}


@pytest.mark.parametrize("family", RECURRENT_FAMILIES + CONVOLUTION_FAMILIES)
@pytest.mark.parametrize("assistant", ["prompt_lookup", "drop_in_assistant", "rejected_drafts"])
def test_assisted_decoding_on_a_decoder_with_state_is_greedy_or_refused(family, assistant):
    """transformers 5.25 runs assisted decoding on recurrent decoders and drifts from greedy decoding (5.24 refused
    it): the drop-in refuses it on every version, naming the reason; a convolution's window is rolled back exactly,
    so there it equals transformers' greedy decoding, rejected drafts included."""
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, SYSTEM[:4]])
    refused = has_recurrent_state(family)
    kwargs = _assistant(upstream, assistant, refused)
    if refused:
        with pytest.raises(ValueError, match=r"not supported on .*recurrent state \(linear_attention layers\)"):
            generate_logits(ours, prompt.inputs(), max_new_tokens=6, **kwargs)
        return
    expected_ids, expected = generate_logits(upstream, prompt.inputs(), max_new_tokens=6)
    if assistant == "rejected_drafts":  # the assistant alone answers otherwise: some of its drafts are rejected
        assert not torch.equal(generate_logits(kwargs["assistant_model"], prompt.inputs(), 6)[0], expected_ids)
    ids, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=6, **kwargs)
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)


@pytest.mark.parametrize("family", CONVOLUTION_FAMILIES)
def test_convolution_layers_keep_no_recurrent_state(family):
    """Why their assisted decoding is exact: after transformers' own forward, their linear-attention cache layers
    hold convolution windows only (a recurrent state could not be cut back)."""
    upstream, ours = model_pair(family)
    with torch.no_grad():
        cache = upstream(**Prompt(ours.config, [SYSTEM, IMAGE, USER]).inputs(), use_cache=True).cache
    linear = [layer for layer in cache.layers if isinstance(layer, LinearAttentionCacheLayerMixin)]
    assert linear and all(any(layer.is_conv_states_initialized.values()) for layer in linear)
    assert not any(any(layer.is_recurrent_states_initialized.values()) for layer in linear)
    assert recurrent_layer_types(ours.config) == []


def test_recurrent_decoders_are_those_transformers_5_24_called_stateful():
    """The structural rule (layer types) refuses exactly the families transformers 5.24 refused (`_is_stateful`,
    removed in 5.25, where the families with `linear_attention` layers are checked instead)."""
    for family, case in sorted(FAMILY_CASES.items()):
        config = case.make_config()
        stateful = getattr(case.upstream_class, "_is_stateful", None)
        if stateful is None:  # transformers >= 5.25
            stateful = "linear_attention" in (getattr(config.get_text_config(decoder=True), "layer_types", None) or ())
        assert bool(recurrent_layer_types(config)) == stateful, family
