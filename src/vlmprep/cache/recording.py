"""transformers' past recording (`Cache.activate_past_recording`), turned on and off the same way on every supported
release.

While a cache layer records its past, a sliding-window layer keeps every K/V it was given (not only its window) and a
linear-attention layer keeps every input of its convolutions, so that `crop` can put them back. transformers 5.25 also
lets a recording linear-attention layer keep past recurrent states (`recurrent_states_to_keep`), and then changed what
a call without that argument means: it stores `None`, which the Gated DeltaNet and Mamba-2 forwards of 5.25.0 take for
a number (`min(None, seq_len)`: TypeError), and every forward clones each recurrent state into
`recurrent_states_history` until the next `crop`. `record_past` keeps none (0); `drop_recurrent_history` empties what
a forward still adds there; `stop_recording` leaves a cache as the same forwards without recording would have left it.
"""

from __future__ import annotations

import inspect

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, LinearAttentionCacheLayerMixin

__all__ = ["drop_recurrent_history", "holds_recurrent_state", "record_past", "records_past", "stop_recording"]


def record_past(cache: Cache, recurrent_layers: bool = True) -> None:
    """Turn on past recording on the cache's layers, keeping no past recurrent states.

    Args:
        cache (`Cache`): the cache (a `DynamicCache`; its layers exist, built from the model's config).
        recurrent_layers (`bool`, *optional*, defaults to `True`):
            also the layers holding only a running state (convolution, linear attention, Mamba). `False` leaves them as
            a forward without recording uses them: the prefix store reads their states after each forward itself
            (`vlmprep.cache.recurrent_state.capture_recurrent_states`), while a recording one would run every decoded
            token's convolution over all its recorded inputs.
    """
    for layer in cache.layers:
        activate = getattr(layer, "activate_past_recording", None)
        if activate is None or (not recurrent_layers and _only_running_state(layer)):
            continue
        # transformers >= 5.25: `recurrent_states_to_keep=0`, as `None` breaks the 5.25.0 forwards (module docstring)
        activate(**({"recurrent_states_to_keep": 0} if _takes_states_to_keep(activate) else {}))


def records_past(layer) -> bool:
    """Whether a cache layer records its past (transformers' `record_past`; `False` for layers that never do)."""
    return bool(getattr(layer, "record_past", False))


def holds_recurrent_state(layer) -> bool:
    """Whether a cache layer holds a recurrent state now: a state that only moves forward, which `crop` cannot put back
    (transformers 5.24 said so with `is_croppable`; 5.25 answers `True` for every linear-attention layer)."""
    return isinstance(layer, LinearAttentionCacheLayerMixin) and any(layer.is_recurrent_states_initialized.values())


def drop_recurrent_history(cache: Cache) -> None:
    """Empty the past recurrent states a recording layer keeps (transformers >= 5.25 adds one per state and forward,
    even with `recurrent_states_to_keep=0`, until a `crop`): the prefix store never rolls a recurrent state back."""
    for layer in cache.layers:
        history = getattr(layer, "recurrent_states_history", None)
        if history:
            # One list per state: 5.25.0's `dict.fromkeys(..., [])` shares a single list between the states
            layer.recurrent_states_history = {state: [] for state in history}


def stop_recording(cache: Cache) -> None:
    """Turn past recording off, and trim each layer to what it would hold had it never recorded.

    A sliding-window layer keeps its last `sliding_window - 1` K/V, a convolution its last `conv_kernel_size` inputs
    (zero-padded on the left before the first token, as transformers pads a short prefill), as transformers' own
    `generate` leaves them: the cache handed back to a caller does not keep growing with every later turn. Nothing the
    next forward reads is dropped, so continuing from the cache is exact.

    Args:
        cache (`Cache`): the cache, trimmed in place.
    """
    drop_recurrent_history(cache)
    for layer in cache.layers:
        if not records_past(layer):
            continue
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            _trim_convolution_inputs(layer)
        window = getattr(layer, "sliding_window", None) if getattr(layer, "is_sliding", False) else None
        keys = getattr(layer, "keys", None)
        if window and isinstance(keys, torch.Tensor) and keys.ndim == 4 and keys.shape[-2] > window - 1:
            # The window a non-recording `update` keeps; copies, so the recorded K/V are freed
            layer.keys = keys[:, :, -(window - 1) :].clone()  # (batch, heads, window - 1, head_dim)
            layer.values = layer.values[:, :, -(window - 1) :].clone()
        # transformers has no call that turns recording off; 5.25's own `DeferredStopCheck.finish` sets it so too
        layer.record_past = False


def _trim_convolution_inputs(layer) -> None:
    # A recording convolution holds every input since its first forward; without recording it holds exactly
    # `conv_kernel_size` of them (the decode kernels update that window in place)
    for state in range(layer.number_of_states):
        if not layer.is_conv_states_initialized[state]:
            continue
        inputs, kernel = layer.conv_states[state], layer.conv_kernel_size[state]
        window = inputs[..., -kernel:]
        if window.shape[-1] < kernel:  # fewer inputs than the kernel since token 0: zeros before it
            window = torch.nn.functional.pad(window, (kernel - window.shape[-1], 0))
        layer.conv_states[state] = window.clone()  # (..., kernel)


def _only_running_state(layer) -> bool:
    # A linear-attention layer that is not also an attention layer (transformers' `LinearAttentionLayer`)
    return isinstance(layer, LinearAttentionCacheLayerMixin) and not isinstance(layer, CacheLayerMixin)


def _takes_states_to_keep(activate) -> bool:
    parameters = inspect.signature(activate).parameters
    return "recurrent_states_to_keep" in parameters
