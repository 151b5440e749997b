"""Every input a family's forward reads per request or per item travels with a continuous-batching request.

A request carries only the inputs `vlmprep.batching.prompt.request_input_keys` names; any other input the forward reads
would be refused ("Unknown request inputs") or, through paged `generate`, dropped, and the answer would differ from
`generate`'s without a word. Each parameter of every drop-in's `forward` is either such an input or listed here with
why a request does not need it.
"""

from __future__ import annotations

import inspect

import pytest

from support.traits import engine_refusal
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
# Parameters a family's forward takes but never reads once features are supplied (they only reach the encoder's
# `**kwargs`, or nothing), and inputs of a modality vlmprep does not prepare (refused by name).
NOT_READ = {
    "aya_vision": {"image_sizes"},
    "cohere2_vision": {"image_sizes"},
    "internvl": {"image_sizes"},
    "qianfan_ocr": {"image_sizes"},
    "llava_onevision": {"image_sizes_videos"},
    # Video timing metadata of the shared (Qwen2-VL) processor, which the 1D positions never read
    "llava_onevision1_5": {"second_per_grid_ts"},
    "nemotron_h_omni": {"pixel_values_videos"},  # videos are refused
    "molmo2": {"pixel_values_videos", "video_token_pooling", "video_grids"},  # videos are refused
    # Computed from `input_ids` by the forward; only a caller passing `inputs_embeds` instead of ids supplies them
    "gemma4": {"per_layer_inputs"},
    # The deprecated name of `pixel_values` (upstream's `deprecate_kwarg` renames it before the forward reads it)
    "fuyu": {"image_patches"},
    # Clip lengths when no mask is passed (the drop-in asks for `feature_attention_mask` instead), and the interleaving
    # of a video with its audio track (`generate` takes it; the engine refuses a request with it)
    "qwen2_5_omni_thinker": {"audio_feature_lengths", "use_audio_in_video"},
    "qwen3_omni_moe_thinker": {"audio_feature_lengths", "use_audio_in_video"},
    # The density router's training targets: a loss term, as `labels` (the router's logits never reach the logits)
    "granite_docling": {"router_labels"},
    # Upstream's forward parameters: an encoder-decoder language model's inputs (Flan-T5 checkpoints are refused), and
    # how pixels are encoded (`generate` refuses `interpolate_pos_encoding=True`)
    **dict.fromkeys(
        ("blip-2", "instructblip", "instructblipvideo"),
        {"decoder_input_ids", "decoder_attention_mask", "interpolate_pos_encoding"},
    ),
}

# Inputs the engine does not carry, for which it refuses the family outright (`vlmprep.batching.support`).
REFUSED_INPUTS = ("moe_mm_token_type_ids",)


@pytest.mark.parametrize("model_type", sorted(DROP_INS))
def test_every_input_the_forward_reads_travels_with_a_request(model_type):
    drop_in = DROP_INS[model_type]
    parameters = set(inspect.signature(drop_in.forward).parameters)
    left = parameters - request_input_keys(drop_in.vision_facts) - ENGINE_SUPPLIED - CALL_OPTIONS
    refused = {name for name in REFUSED_INPUTS if name in parameters and engine_refusal(model_type) == name}
    assert left == NOT_READ.get(model_type, set()) | refused


def rope_index_owner(drop_in: type) -> type | None:
    """The transformers base model class whose `get_rope_index` builds the family's multimodal positions, if any."""
    upstream = next(klass for klass in drop_in.__mro__ if klass.__module__.startswith("transformers.models."))
    base = getattr(inspect.getmodule(upstream), upstream.__name__.replace("ForConditionalGeneration", "Model"), None)
    return base if base is not None and hasattr(base, "get_rope_index") else None


ROPE_FAMILIES = sorted(model_type for model_type, drop_in in DROP_INS.items() if rope_index_owner(drop_in))


def test_the_multimodal_rope_families_are_found():
    assert {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v"} <= set(ROPE_FAMILIES)


# `get_rope_index` parameters the forward fills from inputs of other names (`None`: an option the engine refuses)
ROPE_INPUT_NAMES = {
    "qwen2_5_omni_thinker": {
        "second_per_grids": "video_second_per_grid",
        "audio_seqlens": "feature_attention_mask",
        "use_audio_in_video": None,
    },
}
ROPE_INPUT_NAMES["qwen3_omni_moe_thinker"] = ROPE_INPUT_NAMES["qwen2_5_omni_thinker"]


@pytest.mark.parametrize("model_type", ROPE_FAMILIES)
def test_every_position_input_is_a_position_key(model_type):
    # Every per-item input `get_rope_index` reads besides the grids is a position key, which a request carries and
    # its shared pages are keyed on
    drop_in = DROP_INS[model_type]
    facts = drop_in.vision_facts
    names = ROPE_INPUT_NAMES.get(model_type, {})
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
