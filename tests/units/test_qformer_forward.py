"""The Q-Former families' forward and `generate(inputs_embeds=...)` against transformers' classes: upstream's parameters
in upstream's order (transformers' own tests call the forward positionally and read its signature), `labels` giving
upstream's loss, and generation from input embeddings (upstream's forward requires `input_ids`, `None` there)."""

from __future__ import annotations

import inspect

import pytest
import torch
from transformers import CompileConfig

from conftest import model_pair
from support.references import Prompt, collate
from support.traits import families_with, has_layout
from vlmprep.testing import IMAGE

FAMILIES = families_with(has_layout("qformer_queries"))
GREEDY = {"max_new_tokens": 3, "do_sample": False, "output_scores": True, "return_dict_in_generate": True}


def _placeholder_id(model) -> int:
    # The placeholder of the family's one modality (InstructBLIP-Video's videos, the others' images)
    return model.vision_facts.modalities[0].placeholder_id(model.config)


def _inputs(config) -> dict:
    return Prompt(config, [[2, 5, 6], IMAGE, [7, 8, 9]]).inputs()


def _positional(model, inputs: dict) -> list:
    # Upstream's parameters in their order, up to the last one the call gives
    names = list(inspect.signature(type(model).forward).parameters)[1:]
    last = max(names.index(name) for name in inputs)
    return [inputs.get(name) for name in names[: last + 1]]


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_has_upstreams_parameters_in_upstreams_order(family):
    upstream, ours = model_pair(family)
    assert inspect.signature(type(ours).forward) == inspect.signature(type(upstream).forward)
    # The call binds as upstream's does: every parameter by position, a parameter named twice refused
    names = [name for name in inspect.signature(type(upstream).forward).parameters if name not in ("self", "kwargs")]
    with pytest.raises(TypeError, match="multiple values"):
        ours.forward(*[None] * len(names), **{names[0]: None})


@pytest.mark.parametrize("family", FAMILIES)
def test_labels_give_upstreams_loss(family):
    upstream, ours = model_pair(family)
    inputs = _inputs(ours.config)
    labels = inputs["input_ids"].masked_fill(inputs["input_ids"] == _placeholder_id(ours), -100)
    with torch.no_grad():
        expected = upstream(**inputs, labels=labels)
        actual = ours(**inputs, labels=labels)
        other = ours(**inputs, labels=labels.roll(1, dims=-1))
    assert expected.loss is not None
    torch.testing.assert_close(actual.loss, expected.loss, atol=1e-5, rtol=0)
    torch.testing.assert_close(actual.logits, expected.logits, atol=1e-5, rtol=0)
    assert (other.loss - actual.loss).abs() > 1e-4  # the labels reach the loss


@pytest.mark.parametrize("family", FAMILIES)
def test_positional_call_equals_upstreams(family):
    upstream, ours = model_pair(family)
    inputs = _inputs(ours.config)
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    with torch.no_grad():
        expected = upstream(*_positional(upstream, inputs))
        actual = ours(*_positional(ours, inputs))
    torch.testing.assert_close(actual.logits, expected.logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("with_ids", [False, True], ids=["embeds_only", "ids_and_embeds"])
@pytest.mark.parametrize("family", FAMILIES)
def test_generate_from_inputs_embeds_equals_upstream(family, with_ids):
    upstream, ours = model_pair(family)
    config = ours.config
    # Two rows of different lengths, left-padded: the language model's positions come from the mask
    prompts = [Prompt(config, [[2, 5, 6], IMAGE, [7, 8, 9]]), Prompt(config, [[2], IMAGE, [7]], seed=5)]
    inputs = collate(prompts, config.text_config.pad_token_id)
    input_ids = inputs.pop("input_ids")
    inputs["inputs_embeds"] = upstream.get_input_embeddings()(input_ids)
    if with_ids:
        inputs["input_ids"] = input_ids
    expected, actual = upstream.generate(**inputs, **GREEDY), ours.generate(**inputs, **GREEDY)
    assert torch.equal(actual.sequences, expected.sequences)
    for step_actual, step_expected in zip(actual.scores, expected.scores, strict=True):
        torch.testing.assert_close(step_actual, step_expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_language_model_gets_upstreams_positions_in_a_left_padded_batch(family):
    # Rope is relative and OPT numbers tokens from the mask itself, so the logits alone would not show other positions
    upstream, ours = model_pair(family)
    config = ours.config
    prompts = [Prompt(config, [[2, 5, 6], IMAGE, [7, 8, 9]]), Prompt(config, [[2], IMAGE, [7]], seed=5)]
    inputs = collate(prompts, config.text_config.pad_token_id)
    positions = {}
    for model in (upstream, ours):
        seen = positions[model] = []
        hook = model.language_model.register_forward_pre_hook(
            lambda module, args, kwargs, seen=seen: seen.append(kwargs.get("position_ids")), with_kwargs=True
        )
        try:
            model.generate(**inputs, max_new_tokens=2, do_sample=False)
        finally:
            hook.remove()
    assert len(positions[ours]) == len(positions[upstream]) == 2
    for actual, expected in zip(positions[ours], positions[upstream], strict=True):
        assert torch.equal(actual, expected)


@pytest.mark.parametrize("family", FAMILIES)
def test_use_cache_false_decodes_as_upstream(family):
    # Upstream's language model generates from input embeddings, which always caches: each step's hidden states
    # cover the new token only
    upstream, ours = model_pair(family)
    inputs = _inputs(ours.config)
    options = {**GREEDY, "use_cache": False, "output_hidden_states": True}
    expected, actual = upstream.generate(**inputs, **options), ours.generate(**inputs, **options)
    assert torch.equal(actual.sequences[:, -3:], expected.sequences[:, -3:])
    shapes = [[tuple(layer.shape) for layer in step] for step in actual.hidden_states]
    assert shapes == [[tuple(layer.shape) for layer in step] for step in expected.hidden_states]
    for step_actual, step_expected in zip(actual.scores, expected.scores, strict=True):
        torch.testing.assert_close(step_actual, step_expected, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_static_cache_compiles_the_whole_models_forward_with_upstreams_outputs():
    # Upstream compiles its language model's forward (its `generate` runs the language model's); the drop-in's
    # `generate` runs the whole model, whose forward is compiled: transformers' compile tests look at the former
    upstream, ours = model_pair("instructblip")
    compile_config = CompileConfig(fullgraph=True, dynamic=False)
    compile_config._compile_all_devices = True  # compile on CPU too
    options = {**GREEDY, "cache_implementation": "static", "compile_config": compile_config}
    inputs = _inputs(ours.config)
    expected, actual = upstream.generate(**inputs, **options), ours.generate(**inputs, **options)
    assert hasattr(ours, "_compiled_call") and hasattr(upstream.language_model, "_compiled_call")
    assert torch.equal(actual.sequences, expected.sequences)
    for step_actual, step_expected in zip(actual.scores, expected.scores, strict=True):
        torch.testing.assert_close(step_actual, step_expected, atol=1e-5, rtol=0)
