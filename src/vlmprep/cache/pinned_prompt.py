"""Cache layers that pin their prompt and slide a window over what follows (Unlimited-OCR's reference sliding-window
layers, `_layer_type == "reference_sliding_attention"`), made to compute what one forward of the whole prompt does.

Upstream declares the prompt's length (`set_prefill_length`) in its `_prefill` while the cache is empty; vlmprep's
prefill runs upstream's `_prefill` once per chunk, so the whole prompt's length is declared before the first chunk
(`declare_pinned_prompt_length`). A caller's cache is reopened before the prompt is planned (`reopen_pinned_prompt`).
Nothing here names a model: the layers are recognised by their layer type.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicSlidingWindowLayer

__all__ = ["declare_pinned_prompt_length", "pinning_layers", "reopen_pinned_prompt"]

# The layer type of the cache layers that pin the prompt (upstream's `_layer_type`).
PINNED_PROMPT_LAYER_TYPE = "reference_sliding_attention"


def pinning_layers(cache: Cache) -> list:
    """The cache layers that pin the prompt (upstream's reference sliding-window layers)."""
    return [layer for layer in cache.layers if getattr(layer, "_layer_type", None) == PINNED_PROMPT_LAYER_TYPE]


def reopen_pinned_prompt(cache: Cache, prompt_length: int) -> None:
    """Make a caller's cache continue as one forward of the whole prompt: what the pinning layers hold after their
    pinned prompt (an answer, decoded in the window) joins the pinned part, and the next prompt's length is declared
    anew. Upstream would decode the new prompt's tokens in the window instead (one more decoded token each).

    Tokens held after the pinned part attended everything before them as long as the window never slid; once it has,
    their states are not a whole-prompt forward's and they are dropped (the caller's ids recompute them).

    Args:
        cache (`Cache`): the caller's cache, holding tokens.
        prompt_length (`int`): the ids passed with it (the whole conversation, or only the tokens after the cache).

    Raises:
        `ValueError`: a static cache of these layers, or a window that slid while the ids passed start after it.
    """
    held = int(cache.get_seq_length())  # transformers >= 5.25: a 0-d tensor when layer 0 is linear attention
    for layer in pinning_layers(cache):
        if not layer.is_initialized or layer.prefill_cumulative_length == 0:
            continue
        if not isinstance(layer, DynamicSlidingWindowLayer):
            raise ValueError(
                f"A non-empty {type(layer).__name__} cache cannot be continued: its prompt part has a fixed size. "
                "Continue with the default (dynamic) cache, or pass the whole conversation without a cache."
            )
        kept = layer.keys.shape[-2] if layer.keys.ndim == 4 else 0  # (batch, heads, tokens, head_dim), or empty
        if kept != layer.cumulative_length and prompt_length < held:
            raise ValueError(
                f"The cache's window dropped {layer.cumulative_length - kept} of the tokens after its prompt, which "
                "the rest of this prompt attends: pass the whole conversation's ids (and attention mask) with the "
                "cache, so that they are computed again, or no cache."
            )
        if kept:
            if kept == layer.cumulative_length:  # the window never slid: every held token saw all before it
                layer.prefill_keys = torch.cat([layer.prefill_keys, layer.keys], dim=-2)
                layer.prefill_values = torch.cat([layer.prefill_values, layer.values], dim=-2)
                layer.prefill_cumulative_length += kept
            layer.keys, layer.values = layer.keys[..., :0, :], layer.values[..., :0, :]
        layer.cumulative_length = 0
        layer.prefill_length = None


def declare_pinned_prompt_length(cache: Cache, prompt_length: int) -> None:
    """Declare the whole prompt's length to every pinning layer before its first prefill forward (a layer keeps the
    first declaration: later ones, upstream's per chunk included, change nothing).

    Args:
        cache (`Cache`): the call's cache.
        prompt_length (`int`): the whole prompt's tokens, those already cached included.
    """
    for layer in pinning_layers(cache):
        layer.set_prefill_length(prompt_length)
