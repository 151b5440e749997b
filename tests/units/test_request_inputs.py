"""Every input a family's forward reads per request or per item travels with a continuous-batching request.

A request carries only the inputs `vlmprep.batching.prompt.request_input_keys` names; any other input the forward reads
would be refused ("Unknown request inputs") or, through paged `generate`, dropped, and the answer would differ from
`generate`'s without a word. Each parameter of every drop-in's `forward` is either such an input or listed here with
why a request does not need it.
"""

from __future__ import annotations

import inspect

import pytest

from support.registry import FAMILY_CASES
from support.traits import engine_refusal, families_with, is_encoder_decoder, sampled
from vlmprep.batching.prompt import request_input_keys
from vlmprep.models.registry import load_drop_in_classes

DROP_INS = load_drop_in_classes()

# The engine supplies these (ids, positions, its paged cache, the planned features) or they are not inputs at all.
ENGINE_SUPPLIED = {
    "self",
    "kwargs",
    "input_ids",
    "position_ids",
    "past_key_values",
    "cache",
    "cache_position",
    "inputs_embeds",
    "mm_encoder_outputs",
    "logits_to_keep",
    "labels",
    "use_cache",
    "return_dict",
    "output_attentions",
    "output_hidden_states",
}
# Options of a whole call, not of a request or an item: the engine takes none of them.
CALL_OPTIONS = {
    "vision_feature_layer",
    "vision_feature_select_strategy",
    "vision_aspect_ratio",
    "output_router_logits",
    "downsample_mode",  # MiniCPM's: whether the tower's window merger runs, for every view of the call
}
# Inputs the engine does not carry, for which it refuses the family outright (`vlmprep.batching.support`).
REFUSED_INPUTS = ("moe_mm_token_type_ids",)
# An encoder-decoder's decoder inputs and encoder output: the engine refuses such a model outright.
ENCODER_DECODER_INPUTS = frozenset(
    {"decoder_input_ids", "decoder_attention_mask", "decoder_inputs_embeds", "decoder_position_ids", "encoder_outputs"}
)


def unread_inputs(model_type: str) -> frozenset[str]:
    """Parameters the family's forward takes but never reads once features are supplied, and inputs of a modality
    vlmprep does not prepare (its case's `unread_inputs`)."""
    return FAMILY_CASES[model_type].unread_inputs if model_type in FAMILY_CASES else frozenset()


@pytest.mark.parametrize("model_type", sorted(DROP_INS))
def test_every_input_the_forward_reads_travels_with_a_request(model_type):
    drop_in = DROP_INS[model_type]
    if "continuous_batching_refusal" in dir(drop_in):
        pytest.skip(drop_in.continuous_batching_refusal(None))  # the engine runs no request of it: nothing travels
    parameters = set(inspect.signature(drop_in.forward).parameters)
    left = parameters - request_input_keys(drop_in.vision_facts) - ENGINE_SUPPLIED - CALL_OPTIONS
    refused = {name for name in REFUSED_INPUTS if name in parameters and engine_refusal(model_type) == name}
    if is_encoder_decoder(model_type):
        refused |= ENCODER_DECODER_INPUTS & parameters
    assert left == set(unread_inputs(model_type)) | refused


def rope_index_owner(drop_in: type) -> type | None:
    """The transformers base model class whose `get_rope_index` builds the family's multimodal positions, if any."""
    upstream = next(klass for klass in drop_in.__mro__ if klass.__module__.startswith("transformers.models."))
    base = getattr(inspect.getmodule(upstream), upstream.__name__.replace("ForConditionalGeneration", "Model"), None)
    return base if base is not None and hasattr(base, "get_rope_index") else None


ROPE_FAMILIES = sorted(model_type for model_type, drop_in in DROP_INS.items() if rope_index_owner(drop_in))


def test_the_multimodal_rope_families_are_found():
    # The Qwen-VL families whose continuations read their rope positions
    assert set(families_with(sampled("rope_continuation"))) <= set(ROPE_FAMILIES)


@pytest.mark.parametrize("model_type", ROPE_FAMILIES)
def test_every_position_input_is_a_position_key(model_type):
    # Every per-item input `get_rope_index` reads besides the grids is a position key, which a request carries and
    # its shared pages are keyed on
    drop_in = DROP_INS[model_type]
    facts = drop_in.vision_facts
    names = FAMILY_CASES[model_type].rope_input_names if model_type in FAMILY_CASES else {}
    read = {names.get(name, name) for name in inspect.signature(rope_index_owner(drop_in).get_rope_index).parameters}
    read.discard(None)
    # A `get_rope_index` copied from Qwen2-VL may take inputs its model never gets (PaddleOCR-VL's `video_grid_thw`:
    # the model takes no videos): only what a request can pass to `forward` is read.
    read &= {"self", "kwargs", *inspect.signature(drop_in.forward).parameters}
    handled = {"self", "kwargs", "input_ids", "attention_mask", facts.token_type_key, *CALL_OPTIONS}
    for modality in facts.modalities:
        handled.update(modality.per_item_keys)
    position_keys = {key for modality in facts.modalities for key in modality.position_keys}
    assert read - handled == position_keys
