"""Rolling a KV cache back to a resume point, exactly or not at all."""

from __future__ import annotations

import torch
from transformers.cache_utils import LinearAttentionCacheLayerMixin

from ..cache.recording import holds_recurrent_state, records_past
from ..cache.recurrent_state import cache_length


def roll_back_cache(cache, past_length: int, resume_point: int) -> int:
    """Crop `cache` from `past_length` back to `resume_point` tokens.

    A layer that can no longer crop that far (a sliding-window layer that already dropped the states the window
    would need, a linear-attention layer holding a recurrent state, which only moves forward, or a convolution that
    kept only its last window) cannot be rolled back exactly; the cache is then emptied and prefill starts from 0,
    always exact.

    Args:
        cache (`Cache`): the cache to crop in place.
        past_length (`int`): tokens it holds.
        resume_point (`int`): tokens it should hold.

    Returns:
        `int`: the tokens it holds afterwards (`resume_point`, or 0 when it had to be emptied).
    """
    if resume_point > 0 and all(_layer_can_roll_back(layer, past_length, resume_point) for layer in cache.layers):
        try:
            cache.crop(resume_point - past_length)
        except (RuntimeError, ValueError):
            pass
        else:
            if cache_length(cache) == resume_point:
                return resume_point
    # Emptied rather than cropped to 0: models such as PaliGemma treat an initialized cache as "not first forward"
    cache.reset()
    return 0


def _layer_can_roll_back(layer, past_length: int, resume_point: int) -> bool:
    if isinstance(layer, LinearAttentionCacheLayerMixin) and not _running_state_can_roll_back(
        layer, past_length, resume_point
    ):
        return False
    keys = getattr(layer, "keys", None)
    if not isinstance(keys, torch.Tensor) or keys.ndim != 4:
        return not getattr(layer, "is_initialized", False)
    window = getattr(layer, "sliding_window", None) if getattr(layer, "is_sliding", False) else None
    first_held = past_length - keys.shape[-2]  # position of the oldest state the layer still holds
    first_needed = max(0, resume_point - (window - 1)) if window else 0
    return first_held <= first_needed


def _running_state_can_roll_back(layer, past_length: int, resume_point: int) -> bool:
    # Decided from what the layer holds, not from `is_croppable` (transformers 5.24: False once a recurrent state is
    # held; 5.25: always True, and `crop` raises unless the layer records, or takes a past state from a history kept
    # per forward, not per token). A recurrent state only moves forward: no state of an earlier token is held.
    if holds_recurrent_state(layer):
        return False
    convolutions = [state for state in range(layer.number_of_states) if layer.is_conv_states_initialized[state]]
    if not convolutions or not records_past(layer):
        return False  # nothing held yet (its `crop` would index empty states), or only the last window
    # A recording convolution holds every input since its first forward: enough if they reach back one kernel from
    # the resume point (or to token 0)
    return all(
        past_length - layer.conv_states[state].shape[-1] <= max(0, resume_point - layer.conv_kernel_size[state])
        for state in convolutions
    )
