"""What assisted decoding (`prompt_lookup_num_tokens`, `assistant_model=`) needs from the drop-ins.

transformers' `_assisted_decoding` runs its first forward over the whole prompt followed by the draft tokens, without
calling `_prefill`: it never slices the prompt after a non-empty cache (the cached tokens would be fed again), it gives
every draft token the prompt's last `token_type_ids` and no other token type (`mm_token_type_ids`,
`moe_mm_token_type_ids`), and a draft copied from an item's placeholders (prompt lookup) is taken for one. vlmprep keeps
that forward exact by feeding only the tokens after a caller's cache and typing the draft tokens as generated tokens,
refuses a drafted placeholder clearly, and does not restore a stored prefix into an assisted call (an assistant model
needs the features of every item: `vlmprep.generation.prefix.PrefixRequest.store_only_reason`).

A decoder with a recurrent state (Gated DeltaNet, Mamba, KDA: a state that only moves forward) cannot be rolled back out
of a rejected draft exactly: transformers 5.24 refused assisted decoding on it (`_is_stateful`); 5.25 rolls the state
back from a history and drifts from greedy decoding (Qwen3.5: 2.7-3.8 in logits). vlmprep refuses it on every version
(`check_no_recurrent_state`), decided by the decoder's layer types; a short convolution's window is cut back exactly.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers import GenerationMixin
from transformers.cache_utils import DYNAMIC_LAYER_TYPE_MAPPING, LinearAttentionCacheLayerMixin
from transformers.generation import GenerationMode

from ..cache.recurrent_state import cache_length
from .facts import TOKEN_TYPE_KEYS, VisionFacts
from .prepared import PlannedEncoderOutputs

_GENERATE_SIGNATURE = inspect.signature(GenerationMixin.generate)

# Layer types whose linear-attention cache layer holds only a short convolution's window (LFM2's `conv`, the attention
# plus convolution layers of Inkling): the cache records the window while drafts are verified and `crop` cuts it back
# to the accepted tokens, exactly (no recurrent state, which only moves forward, is kept).
CONVOLUTION_WINDOW_LAYER_TYPES = frozenset({"conv", "hybrid", "hybrid_sliding"})


def assistant_model_of(args: tuple, kwargs: dict[str, Any]):
    """The `assistant_model` a `generate(*args, **kwargs)` call was given (by keyword or by position), or `None`."""
    if "assistant_model" in kwargs:
        return kwargs["assistant_model"]
    return _GENERATE_SIGNATURE.bind_partial(None, *args).arguments.get("assistant_model")  # `None` stands for `self`


def is_assisted(generation_config, assistant_given: bool = False) -> bool:
    """Whether a call decodes with drafts: an assistant model, prompt lookup, early exit, MTP, or an assistant's call.

    Args:
        generation_config: the call's generation config.
        assistant_given (`bool`, *optional*, defaults to `False`): whether `generate` was given an `assistant_model`.
    """
    return bool(
        assistant_given
        or generation_config.prompt_lookup_num_tokens is not None
        or generation_config.assistant_early_exit is not None
        or getattr(generation_config, "use_mtp", False)
        or getattr(generation_config, "is_assistant", False)
    )


def recurrent_layer_types(config) -> list[str]:
    """The decoder's layer types whose cache keeps a recurrent state, which a rejected draft cannot be cut out of.

    Read from the decoder config's `layer_types` and the cache layer transformers builds for each
    (`DYNAMIC_LAYER_TYPE_MAPPING`): a linear-attention layer (Gated DeltaNet, Mamba, KDA) holds a recurrent state,
    unless its type is a short convolution's window (`CONVOLUTION_WINDOW_LAYER_TYPES`). Decided by structure, not by
    upstream's `_is_stateful` (removed in transformers 5.25).

    Args:
        config (`PreTrainedConfig`): the model's config (its decoder config is read).

    Returns:
        `list[str]`: the recurrent layer types, sorted; empty for a decoder whose every layer can be rolled back.
    """
    layer_types = getattr(config.get_text_config(decoder=True), "layer_types", None) or ()
    recurrent = set()
    for layer_type in layer_types:
        # A type upstream's mapping lacks is one a model's own cache class handles (MiniMax-M3's sparse attention)
        layer_class = DYNAMIC_LAYER_TYPE_MAPPING.get(layer_type)
        is_linear = layer_class is not None and issubclass(layer_class, LinearAttentionCacheLayerMixin)
        if is_linear and layer_type not in CONVOLUTION_WINDOW_LAYER_TYPES:
            recurrent.add(layer_type)
    return sorted(recurrent)


def check_no_recurrent_state(model, generation_mode: GenerationMode) -> None:
    """Refuse assisted decoding on a decoder with a recurrent state: it could not equal greedy decoding.

    Assisted decoding runs the drafts through the decoder, then cuts the rejected ones out of the cache. An attention
    layer drops their KV and a convolution its window, exactly; a recurrent state has already absorbed them.
    transformers 5.24 refused such models (`_is_stateful`); 5.25 restores the state from a recorded history and its
    logits drift from greedy decoding's (Qwen3.5's prompt lookup: 2.7-3.8 on steps 2-4, with no error).

    Args:
        model: the drop-in (its config gives the decoder's layer types).
        generation_mode (`GenerationMode`): the call's mode; only `ASSISTED_GENERATION` (drafts: prompt lookup, an
            assistant model, MTP, early exit) is checked.

    Raises:
        `ValueError`: the call is assisted and the decoder has layers with a recurrent state, or layers holding item
            states (`FamilyHooks.item_state_layers`).
    """
    if generation_mode != GenerationMode.ASSISTED_GENERATION:
        return
    if model.item_state_layers():
        # transformers fails here too, with a raw shape error from the cropped layers
        raise ValueError(
            f"Assisted decoding (`prompt_lookup_num_tokens`, `assistant_model`, MTP, early exit) is not supported on "
            f"{model.config.model_type}: cutting a rejected draft out of the cache crops every layer to a token count, "
            "and its cross-attention layers hold the images' states, not per-token states. Generate without drafts: "
            "drop `prompt_lookup_num_tokens` and `assistant_model`."
        )
    layer_types = recurrent_layer_types(model.config)
    if layer_types:
        raise ValueError(
            f"Assisted decoding (`prompt_lookup_num_tokens`, `assistant_model`, MTP, early exit) is not supported on "
            f"{model.config.model_type}: its decoder keeps a recurrent state ({', '.join(layer_types)} layers), which "
            "cannot be rolled back out of a rejected draft exactly, so the answer could differ from greedy decoding "
            "(transformers 5.24 refused it too; 5.25 runs it and drifts). Generate without drafts: drop "
            "`prompt_lookup_num_tokens` and `assistant_model` (decoding then runs one token per step, exactly)."
        )


def type_draft_tokens_as_generated(
    facts: VisionFacts, input_ids: torch.Tensor, model_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The inputs of a first forward with the token types of the draft tokens past the prompt set as generation sets
    them.

    Assisted decoding's first forward holds the prompt and then the draft tokens. Upstream's `_prepare_token_type_ids`
    types the drafts as the prompt's last token, and only in `token_type_ids`: PaliGemma's drafts (type 0) would join
    the bidirectional prefix, which then attends to them, and a Gemma3 prompt ending in an image would put them in the
    image's block. The other token types (`mm_token_type_ids`, `moe_mm_token_type_ids`) are not extended at all, and
    upstream's `prepare_inputs_for_generation` then cuts them from their end: the prompt's types land on the wrong
    tokens when a cache holds part of the prompt (ERNIE 4.5 VL sends tokens to the wrong experts: wrong logits, no
    error), and a forward over the whole prompt gets fewer types than tokens (an `IndexError` in ERNIE 4.5 VL's MoE).
    Here every token type of a draft is the generated tokens' (text, or PaliGemma's suffix), as one-token decoding
    has it (ERNIE 4.5 VL decodes with no `moe_mm_token_type_ids`: every token a text token). Any other forward has no
    token past the prompt, and is returned as it is.

    Args:
        facts (`VisionFacts`): the family's facts (which input holds the token types, the generated tokens' type).
        input_ids (`torch.Tensor` of shape `(batch_size, length)`): the forward's ids (prompt and drafts).
        model_kwargs (`dict[str, Any]`): the inputs `prepare_inputs_for_generation` was called with.

    Returns:
        `dict[str, Any]`: `model_kwargs`, with new token-type tensors where draft tokens followed the prompt.
    """
    planned = model_kwargs.get("mm_encoder_outputs")
    if not (model_kwargs.get("is_first_iteration") and isinstance(planned, PlannedEncoderOutputs)):
        return model_kwargs
    # `input_ids` start at `offset` (the tokens after a cache, when only those were passed) and end after the drafts
    drafts = planned.prepared.offset + input_ids.shape[-1] - planned.end
    if drafts <= 0:
        return model_kwargs
    typed = {}
    for key in TOKEN_TYPE_KEYS:
        token_types = model_kwargs.get(key)
        if not isinstance(token_types, torch.Tensor) or token_types.ndim != 2:
            continue
        generated = facts.generated_token_type if key == facts.token_type_key else 0
        if key == "token_type_ids":  # upstream has already appended the drafts, typed as the last prompt token
            if facts.bidirectional is None:
                continue  # a causal family's token types change no mask
            token_types = token_types.clone()
            token_types[..., -drafts:] = generated  # (batch, prompt + drafts)
        else:  # they end with the prompt
            token_types = torch.nn.functional.pad(token_types, (0, drafts), value=generated)
        typed[key] = token_types
    return {**model_kwargs, **typed} if typed else model_kwargs


def first_forward_after_cache(input_ids: torch.Tensor, model_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The inputs of a first forward over the whole prompt, cut to the tokens after the cache when it holds some.

    `_prefill` cuts them itself; assisted decoding's first forward does not, and would feed the cached tokens again on
    top of their KV. Only a prompt that starts at position 0 (no `input_ids` passed after the cache alone) is cut.
    transformers splits that forward's hidden states and attentions into steps as if it covered the whole prompt:
    5.25 fails on the shorter hidden states, 5.24 returns them at the wrong positions. A cut forward that returns
    them is refused.

    Args:
        input_ids (`torch.Tensor` of shape `(batch_size, length)`): the forward's ids (prompt and drafts).
        model_kwargs (`dict[str, Any]`): the inputs `prepare_inputs_for_generation` was called with.

    Returns:
        `dict[str, Any]`: `model_kwargs`, with `next_sequence_length` set where the forward must be cut.

    Raises:
        `ValueError`: the forward must be cut and the call returns hidden states or attentions.
    """
    planned = model_kwargs.get("mm_encoder_outputs")
    cache = model_kwargs.get("cache")
    if (
        not model_kwargs.get("is_first_iteration")
        or model_kwargs.get("next_sequence_length") is not None
        or not isinstance(planned, PlannedEncoderOutputs)
        or planned.prepared.offset != 0
        or input_ids.shape[-1] < planned.end  # a prefill chunk (`CrossAttention.every_forward`: the whole plan)
        or cache is None
        or all(getattr(cache, "is_linear", [False]))
    ):
        return model_kwargs
    past_length = cache_length(cache)
    if past_length == 0 or past_length >= input_ids.shape[-1]:
        return model_kwargs
    if model_kwargs.get("output_hidden_states") or model_kwargs.get("output_attentions"):
        raise ValueError(
            f"Assisted decoding after a cache holding {past_length} tokens of the prompt cannot return hidden states "
            "or attentions: its first forward runs the tokens after the cache only (feeding the cached ones again "
            "gives other logits), and transformers splits them as if it covered the whole prompt (5.25 fails, 5.24 "
            "places them wrongly). Pass no `cache`, no drafts, or no `output_hidden_states` / `output_attentions`."
        )
    return {**model_kwargs, "next_sequence_length": input_ids.shape[-1] - past_length}


def check_no_placeholder_in_drafts(model, input_ids: torch.Tensor, model_kwargs: dict[str, Any]) -> None:
    """Refuse a first assisted forward whose drafts hold a placeholder of items that forward fills.

    Prompt lookup copies the tokens that followed an earlier match of the prompt's last tokens, placeholders included
    (text before an image); upstream's forward then finds more placeholders than feature rows and fails with a bare
    "features and tokens do not match" (the plain class fails alike). One-token decoding would embed such a token as
    text: no drop-in forward can tell it from the prompt's own placeholders, so it is refused with a way out.

    Args:
        model: the drop-in (its facts and config give the placeholder ids).
        input_ids (`torch.Tensor` of shape `(batch_size, length)`): the forward's ids (prompt and drafts).
        model_kwargs (`dict[str, Any]`): the inputs `prepare_inputs_for_generation` was called with.

    Raises:
        `ValueError`: a draft is the placeholder of a modality whose feature rows this forward fills.
    """
    planned = model_kwargs.get("mm_encoder_outputs")
    if not (model_kwargs.get("is_first_iteration") and isinstance(planned, PlannedEncoderOutputs)):
        return
    drafts = planned.prepared.offset + input_ids.shape[-1] - planned.end
    for modality in model.vision_facts.modalities if drafts > 0 else ():
        placeholder = getattr(model.config, modality.placeholder_attr, None)
        if planned.get(modality.name) is None or placeholder is None:
            continue  # no rows to fill: a drafted placeholder is embedded as text, as decoding embeds it
        if bool((input_ids[..., -drafts:] == placeholder).any()):
            raise ValueError(
                f"Assisted decoding drafted the {modality.name} placeholder token {placeholder} right after the prompt "
                f"({model.config.model_type}): prompt lookup copies tokens that followed an earlier match, here a "
                f"{modality.name}'s placeholders, and the first forward cannot tell them from the prompt's own "
                f"(transformers' class fails alike). Pass `suppress_tokens=[{placeholder}]` (prompt lookup never "
                "drafts a suppressed token), or generate without `prompt_lookup_num_tokens`."
            )


def first_assisted_forward_inputs(model, input_ids: torch.Tensor, model_kwargs: dict[str, Any]) -> dict:
    """The inputs of assisted decoding's first forward: the tokens after the cache only (`first_forward_after_cache`),
    the drafts typed as generated tokens (`type_draft_tokens_as_generated`), refused where a draft is a placeholder
    (`check_no_placeholder_in_drafts`); any other forward's as they are.

    Args:
        model: the drop-in.
        input_ids (`torch.Tensor` of shape `(batch_size, length)`): the forward's ids (prompt and drafts).
        model_kwargs (`dict[str, Any]`): the inputs `prepare_inputs_for_generation` was called with.

    Returns:
        `dict[str, Any]`: the inputs to hand to upstream's `prepare_inputs_for_generation`.
    """
    check_no_placeholder_in_drafts(model, input_ids, model_kwargs)
    model_kwargs = first_forward_after_cache(input_ids, model_kwargs)
    return type_draft_tokens_as_generated(model.vision_facts, input_ids, model_kwargs)
