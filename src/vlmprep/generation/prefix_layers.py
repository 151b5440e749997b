"""Which cache layers a prefix request can store and restore, and what it stores per layer.

Per layer, the store keeps per-token K/V (`(heads, tokens, head_dim)` per row); a layer holding only a running state
(convolution, linear attention) keeps an empty run there and snapshots instead (`vlmprep.cache.recurrent_state`), as
does a layer holding nothing (one reading another layer's K/V); a layer holding both (Inkling2's `hybrid`, `hybrid_sliding` layers) keeps both. After the layers come what some layers
hold per token beyond K/V (an attention indexer's keys: `vlmprep.cache.layer_extras`), stored like K/V.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import (
    Cache,
    CacheLayerMixin,
    LinearAttentionCacheLayerMixin,
    StaticLayer,
    StaticSlidingWindowLayer,
)
from transformers.generation.configuration_utils import ALL_STATIC_CACHE_IMPLEMENTATIONS

from ..cache.layer_extras import LayerExtras, describe_layer_extras, extended_layer_classes, extra_states
from ..cache.pinned_prompt import pinning_layers
from ..cache.recording import record_past

__all__ = ["layer_refusal", "kv_less_layer_indices", "new_call_cache", "stored_layer_states"]

_DYNAMIC_KINDS = (None, "dynamic", "offloaded")


def layer_refusal(model, cache_implementation: str | None) -> str | None:
    """Why the store cannot be used with this model's cache layers and this cache kind, or `None`.

    Running states are snapshotted from a dynamic cache's recorded inputs, and extra per-token tensors are read from
    a dynamic layer: a static cache of such layers is refused (read from the layers `DynamicCache(config=...)` builds).

    Args:
        model (`PreTrainedModel`): the model.
        cache_implementation (`str`, *optional*): the call's cache kind.

    Returns:
        `str` or `None`: the reason, phrased to follow "not used with".
    """
    cache = DynamicCache(config=model.config)
    pinned = sorted({type(layer).__name__ for layer in pinning_layers(cache)})
    if pinned:
        # A layer that pins its first prompt and slides a window over what follows (Unlimited-OCR's R-SWA): a prefix
        # restored into it would be pinned as the new prompt's, or hold decoded tokens its window already dropped.
        return (
            f"this model's {pinned} cache layers (they pin the prompt they were prefilled with and keep only a window "
            "of what follows, so a stored prefix cannot be resumed exactly)"
        )
    if cache_implementation in _DYNAMIC_KINDS:
        return None
    held = {type(layer).__name__ for layer in cache.layers if isinstance(layer, LinearAttentionCacheLayerMixin)}
    held = sorted(held | set(extended_layer_classes(cache)))
    if held:
        return (
            f"this model's {held} cache layers in a static cache (their running states and per-token extras are "
            "read from a dynamic cache: use the default cache)"
        )
    return None


def kv_less_layer_indices(cache: Cache) -> list[int]:
    """Indices of the layers that hold no per-token K/V after a call's forwards: a running state only (convolution,
    linear attention), or none (a layer reading another layer's K/V: transformers' `DummyLayer`, or Mistral Large 4's
    indexed layers that share K/V and keep only their indexer's keys)."""
    return [
        index
        for index, layer in enumerate(cache.layers)
        if not isinstance(layer, CacheLayerMixin)
        or (getattr(layer, "keys", None) is None and not layer.is_initialized)
    ]


def stored_layer_states(
    cache: Cache, length: int, batch_size: int, item_layers: tuple[int, ...] = ()
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]] | None, LayerExtras]:
    """What the store keeps per token of every row: each layer's K/V, then each per-token extra tensor.

    Args:
        cache (`Cache`): the call's cache after generation, holding `length` tokens.
        length (`int`): the tokens it holds.
        batch_size (`int`): its rows.
        item_layers (`tuple[int, ...]`, *optional*, defaults to `()`): layers holding item states, not per-token
            K/V (`FamilyHooks.item_state_layers`): stored empty, as the layers without K/V.

    Returns:
        `tuple`: per stored run, `(keys, values)` of shape `(batch, heads, length, head_dim)` (`None` instead of the
        list when a layer dropped states: nothing can be stored), and the extras stored after the layers.

    Raises:
        `UnsupportedCacheLayer`: a layer holds something that is not per token (see `describe_layer_extras`).
    """
    states = [None if index in item_layers else _all_states(layer, length) for index, layer in enumerate(cache.layers)]
    for index in (
        *kv_less_layer_indices(cache),
        *item_layers,
    ):  # no per-token K/V: an empty run keeps the layers aligned
        states[index] = (torch.empty((batch_size, 0, length, 0)),) * 2  # (batch, no heads, tokens, no dim)
    if any(state is None for state in states):
        return None, LayerExtras()
    extras = describe_layer_extras(cache, length)
    return [*states, *extra_states(cache, extras)], extras


def _all_states(layer, length: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Keys and values of every one of the `length` positions, `(batch, heads, length, head_dim)`, or `None`."""
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    if not isinstance(keys, torch.Tensor) or keys.ndim != 4:
        return None
    if isinstance(layer, StaticSlidingWindowLayer):
        whole = layer.cumulative_length_int == length <= layer.max_cache_len  # never rolled past its window
    elif isinstance(layer, StaticLayer):
        whole = int(layer.cumulative_length) == length <= layer.max_cache_len
    else:
        whole = keys.shape[-2] == length  # dynamic layers; a sliding one only when recording its past
    return (keys[:, :, :length], values[:, :, :length]) if whole else None


def new_call_cache(model, generation_config, batch_size: int, prompt_length: int, model_kwargs: dict) -> Cache:
    """The empty cache a prefix request restores into: the call's static cache as `generate` would size it, else a
    dynamic cache recording its states (the store reads them at the end); the call's `cache_implementation` is
    consumed, as this cache becomes the call's.

    Args:
        model: the drop-in model.
        generation_config: the call's generation config.
        batch_size (`int`): the call's rows.
        prompt_length (`int`): the prompt's width.
        model_kwargs (`dict`): the call's inputs.

    Returns:
        `Cache`
    """
    kind = generation_config.cache_implementation
    if kind in ALL_STATIC_CACHE_IMPLEMENTATIONS:
        # Sized as `generate` sizes it in its step 7 (which then takes this cache as the caller's)
        if generation_config.max_new_tokens is not None:
            max_length = prompt_length + generation_config.max_new_tokens
        else:
            max_length = generation_config.max_length
        max_cache_length = max(max_length - 1, generation_config.max_cache_len or 0)
        chunk_size = generation_config.prefill_chunk_size
        cache = model._prepare_static_cache(kind, batch_size, max_cache_length, chunk_size, model_kwargs=model_kwargs)
    else:
        cache = DynamicCache(config=model.config, offloading=kind == "offloaded")
        # Sliding-window layers keep every state, so the whole row can be stored; layers holding only a running state
        # do not record: their states are captured after each prefill forward (`capture`) and read at the end
        record_past(cache, recurrent_layers=False)
    generation_config.cache_implementation = None  # this call's copy: the restored cache is its cache now
    return cache
