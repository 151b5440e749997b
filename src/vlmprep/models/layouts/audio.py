"""Audio clips: log-mel frames padded to the longest clip of a batch, with a mask of the real frames.

A clip's features do not depend on the padding a batch adds (its tower masks it), so a clip is handed to the audio
tower, and hashed, without it: the same clip then hits the encoder and prefix caches alone or batched with a longer
one. Gemma 4 and the Qwen-Omni thinkers read `(num_clips, frames, mel_bins)` features with a `(num_clips, frames)`
mask, under their own input names.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["input_ids_for_encoded_items", "scatter_encoded_rows", "select_audio_clips"]


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


def input_ids_for_encoded_items(args: tuple, kwargs: dict[str, Any]) -> torch.Tensor:
    """The `input_ids` of a forward given encoded audio, which a family places by those ids itself.

    Upstream's forwards take audio only as raw features; a drop-in handed encoded clip rows builds the input embeddings
    from the ids, so it needs them, by name, and no `inputs_embeds`.

    Args:
        args (`tuple`): the forward's positional arguments.
        kwargs (`dict[str, Any]`): its keyword arguments.

    Returns:
        `torch.Tensor`: the ids.
    """
    input_ids = args[0] if args else kwargs.get("input_ids")
    if input_ids is None or len(args) > 1 or kwargs.get("inputs_embeds") is not None:
        raise ValueError(
            "Encoded audio (`mm_encoder_outputs['audio']`) is placed by `input_ids`, passed by name: pass "
            "`input_ids` (not `inputs_embeds`) and every other input as a keyword."
        )
    return input_ids


def scatter_encoded_rows(inputs_embeds: torch.Tensor, mask: torch.Tensor, output, modality: str) -> torch.Tensor:
    """`inputs_embeds` with the encoded rows of `output` (its `pooler_output`, per item or joined) at `mask`.

    Args:
        inputs_embeds (`torch.Tensor`): `(batch, tokens, hidden)` embeddings of the ids.
        mask (`torch.Tensor`): `(batch, tokens)`, True at the modality's placeholders.
        output: the modality's encoder output, as `mm_encoder_outputs` holds it.
        modality (`str`): its name, for the error.

    Returns:
        `torch.Tensor`: the embeddings with the rows in placeholder order.
    """
    rows = output.pooler_output
    rows = torch.cat(list(rows)) if isinstance(rows, (list, tuple)) else rows.reshape(-1, rows.shape[-1])
    if int(mask.sum()) != rows.shape[0]:
        raise ValueError(
            f"The prompt has {int(mask.sum())} {modality} placeholder tokens but {rows.shape[0]} encoded {modality} "
            f"rows were given. Pass the rows of every {modality} placeholder of `input_ids`."
        )
    mask = mask.unsqueeze(-1).expand_as(inputs_embeds)
    return inputs_embeds.masked_scatter(mask, rows.to(inputs_embeds.device, inputs_embeds.dtype))
