"""Rolling a KV cache back to a resume point, exactly or not at all."""

from __future__ import annotations

import torch
from transformers.cache_utils import LinearAttentionCacheLayerMixin


def roll_back_cache(cache, past_length: int, resume_point: int) -> int:
    """Crop `cache` from `past_length` back to `resume_point` tokens.

    A layer that can no longer crop that far (a sliding-window layer that already dropped the states the window
    would need, a linear-attention layer holding a recurrent state, which only moves forward) cannot be rolled back
    exactly; the cache is then emptied and prefill starts from 0, always exact.

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
            if cache.get_seq_length() == resume_point:
                return resume_point
    # Emptied rather than cropped to 0: models such as PaliGemma treat an initialized cache as "not first forward"
    cache.reset()
    return 0


def _layer_can_roll_back(layer, past_length: int, resume_point: int) -> bool:
    if isinstance(layer, LinearAttentionCacheLayerMixin) and not layer.is_croppable:
        return False
    keys = getattr(layer, "keys", None)
    if not isinstance(keys, torch.Tensor) or keys.ndim != 4:
        return not getattr(layer, "is_initialized", False)
    window = getattr(layer, "sliding_window", None) if getattr(layer, "is_sliding", False) else None
    first_held = past_length - keys.shape[-2]  # position of the oldest state the layer still holds
    first_needed = max(0, resume_point - (window - 1)) if window else 0
    return first_held <= first_needed
