"""What assisted decoding (`prompt_lookup_num_tokens`, `assistant_model=`) needs from the drop-ins.

transformers' `_assisted_decoding` runs its first forward over the whole prompt followed by the draft tokens, without
calling `_prefill`: it never slices the prompt after a non-empty cache (the cached tokens would be fed again), and it
gives every draft token the prompt's last token type. vlmprep keeps that forward exact by feeding only the tokens after
a caller's cache and typing the draft tokens as generated tokens, and by not restoring a stored prefix into an assisted
call (an assistant model needs the features of every item: `vlmprep.generation.prefix.PrefixRequest.store_only_reason`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers import GenerationMixin

from .facts import VisionFacts
from .prepared import PlannedEncoderOutputs

_GENERATE_SIGNATURE = inspect.signature(GenerationMixin.generate)


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


def type_draft_tokens_as_generated(facts: VisionFacts, model_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The inputs of a first forward with the token types of the tokens past the prompt set as generation sets them.

    Assisted decoding's first forward holds the prompt and then the draft tokens, which upstream's
    `_prepare_token_type_ids` types as the prompt's last token: PaliGemma's drafts (type 0) would join the
    bidirectional prefix, which then attends to them, and a Gemma3 prompt ending in an image would put them in the
    image's block. Any other forward has no token past the prompt, and is returned as it is.

    Args:
        facts (`VisionFacts`): the family's facts (which input holds the token types, the generated tokens' type).
        model_kwargs (`dict[str, Any]`): the inputs `prepare_inputs_for_generation` was called with.

    Returns:
        `dict[str, Any]`: `model_kwargs`, with a new token-type tensor where draft tokens followed the prompt.
    """
    planned = model_kwargs.get("mm_encoder_outputs")
    token_types = model_kwargs.get(facts.token_type_key)
    if not (
        model_kwargs.get("is_first_iteration")
        and facts.bidirectional is not None
        and isinstance(planned, PlannedEncoderOutputs)
        and isinstance(token_types, torch.Tensor)
        and token_types.shape[-1] > planned.end
    ):
        return model_kwargs
    token_types = token_types.clone()
    token_types[..., planned.end :] = facts.generated_token_type  # (batch, prompt + drafts)
    return {**model_kwargs, facts.token_type_key: token_types}


def first_forward_after_cache(input_ids: torch.Tensor, model_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The inputs of a first forward over the whole prompt, cut to the tokens after the cache when it holds some.

    `_prefill` cuts them itself; assisted decoding's first forward does not, and would feed the cached tokens again on
    top of their KV. Only a prompt that starts at position 0 (no `input_ids` passed after the cache alone) is cut.

    Args:
        input_ids (`torch.Tensor` of shape `(batch_size, length)`): the forward's ids (prompt and drafts).
        model_kwargs (`dict[str, Any]`): the inputs `prepare_inputs_for_generation` was called with.

    Returns:
        `dict[str, Any]`: `model_kwargs`, with `next_sequence_length` set where the forward must be cut.
    """
    planned = model_kwargs.get("mm_encoder_outputs")
    cache = model_kwargs.get("cache")
    if (
        not model_kwargs.get("is_first_iteration")
        or model_kwargs.get("next_sequence_length") is not None
        or not isinstance(planned, PlannedEncoderOutputs)
        or planned.prepared.offset != 0
        or cache is None
        or all(getattr(cache, "is_linear", [False]))
    ):
        return model_kwargs
    past_length = cache.get_seq_length()
    if past_length == 0 or past_length >= input_ids.shape[-1]:
        return model_kwargs
    return {**model_kwargs, "next_sequence_length": input_ids.shape[-1] - past_length}
