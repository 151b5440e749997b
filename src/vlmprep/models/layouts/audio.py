"""Audio clips: log-mel frames padded to the longest clip of a batch, with a mask of the real frames.

A clip's features do not depend on the padding a batch adds (its tower masks it), so a clip is handed to the audio
tower, and hashed, without it: the same clip then hits the encoder and prefix caches alone or batched with a longer
one. Gemma 4 and the Qwen-Omni thinkers read `(num_clips, frames, mel_bins)` features with a `(num_clips, frames)`
mask, under their own input names.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["select_audio_clips"]


def select_audio_clips(
    model_kwargs: dict[str, Any], indices: list[int], features_key: str, mask_key: str
) -> dict[str, Any]:
    """The features and masks of the given clips, cut to the longest real clip among them (padding at the end).

    Args:
        model_kwargs (`dict[str, Any]`): the call's inputs.
        indices (`list[int]`): indices among the call's clips.
        features_key (`str`): the name of the `(num_clips, frames, mel_bins)` features.
        mask_key (`str`): the name of the `(num_clips, frames)` mask of real frames.

    Returns:
        `dict[str, Any]`: `{features_key: ..., mask_key: ...}` for those clips, in that order.
    """
    features, mask = model_kwargs[features_key][indices], model_kwargs.get(mask_key)
    if mask is None:
        return {features_key: features}
    mask = mask[indices]
    real = mask.bool()
    # One past each clip's last real frame: padding only follows the real frames (the feature extractors pad at the
    # end), so frames after it are padding in every clip of the selection.
    last = torch.where(real, torch.arange(real.shape[-1], device=real.device) + 1, 0).amax(-1)
    frames = int(last.max()) if last.numel() else 0
    return {features_key: features[:, :frames], mask_key: mask[:, :frames]}
