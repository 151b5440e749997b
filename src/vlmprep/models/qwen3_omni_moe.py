"""Qwen3-Omni thinker: Qwen3-VL's images and videos (with deepstack features), and audio clips, each encoded once.

The layout is the Qwen2.5-Omni thinker's (`patch_grid_audio`): an image or a video is one run of placeholders on its
`(t, h, w)` grid; an audio clip is log-mel features with a mask of its real frames, cut by its tower into windows of
`2 * n_window` frames, each subsampled 8x. The vision tower's deepstack features are kept with each item's features
and fed to its placeholders chunk by chunk, as for Qwen3-VL. Upstream's forward encodes audio from `input_features` on
every call, so the drop-in places encoded clip rows in the input embeddings itself, as upstream's forward does.

Upstream's audio tower pads every window of the clips it encodes together to the longest window among them, and its
strided convolutions read that padding (their biases make it non-zero after the first one): a clip's features depend
on the longest window of the call's clips. So each clip is encoded with its windows padded to the longest window of
every clip of the call, as upstream's forward of the whole prompt pads them, and that padding is hashed with it. Clips
of a second or more (one full window of 100 frames) pad every clip alike.
"""

from dataclasses import replace
from typing import Any

import torch
import transformers
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import _get_feat_extract_output_lengths

from .base import VisionPrepMixin
from .layouts.patch_grid_audio import PATCH_GRID_AUDIO_FACTS, PatchGridAudioLayout


def _windows_padded_as_the_call(model, model_kwargs: dict[str, Any], clips: dict[str, Any]) -> dict[str, Any]:
    # The selected clips (cut to their longest real one) with their windows padded as upstream pads the call's
    # clips: the tower's precomputed `padded_feature`, `chunk_lengths` and `valid_indices`
    if clips.get("feature_attention_mask") is None:
        return clips
    longest = model._longest_window(model_kwargs)
    return {**clips, **model._padded_windows(clips["input_features"], clips["feature_attention_mask"], longest)}


_CLIPS = PATCH_GRID_AUDIO_FACTS.modality("audio")
# The layout's clips, each selection's windows padded as the call's
_AUDIO = replace(_CLIPS, items=replace(_CLIPS.items, unpad=_windows_padded_as_the_call))


class Qwen3OmniMoeThinkerForConditionalGeneration(
    PatchGridAudioLayout, VisionPrepMixin, transformers.Qwen3OmniMoeThinkerForConditionalGeneration
):
    """Drop-in `transformers.Qwen3OmniMoeThinkerForConditionalGeneration` whose vision and audio towers run once, in
    input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.qwen3_omni_moe import Qwen3OmniMoeThinkerForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_qwen3_omni_moe_config
    >>> model = Qwen3OmniMoeThinkerForConditionalGeneration(tiny_qwen3_omni_moe_config()).eval()
    >>> model.audio_placeholder_counts(torch.tensor([40, 22]))  # one 100-frame window: 8x subsampled
    [5, 3]

    ```
    """

    vision_facts = replace(PATCH_GRID_AUDIO_FACTS, other_modalities=(PATCH_GRID_AUDIO_FACTS.modality("video"), _AUDIO))

    def audio_placeholder_counts(self, frames: torch.Tensor) -> list[int]:
        """Audio placeholders of each clip: 13 per full window of `2 * n_window` frames, the rest subsampled 8x.

        Args:
            frames (`torch.Tensor`): `(num_clips,)` real frames of each clip.

        Returns:
            `list[int]`
        """
        return _get_feat_extract_output_lengths(frames, self.config.audio_config.n_window).tolist()

    def encoding_group_key(self, model_kwargs: dict[str, Any]) -> tuple:
        """The longest audio window of a request's clips: requests are encoded together only under the same padding.

        Args:
            model_kwargs (`dict[str, Any]`): one request's inputs.

        Returns:
            `tuple`
        """
        return () if model_kwargs.get("feature_attention_mask") is None else (self._longest_window(model_kwargs),)

    def _longest_window(self, model_kwargs: dict[str, Any]) -> int:
        # The frames upstream pads every window of the call's clips to: a full window once a clip fills one
        window = 2 * self.config.audio_config.n_window
        frames_of_every_clip = model_kwargs["feature_attention_mask"].sum(-1)
        return window if bool((frames_of_every_clip >= window).any()) else int(frames_of_every_clip.max())

    def _padded_windows(self, features: torch.Tensor, mask: torch.Tensor, longest: int) -> dict[str, torch.Tensor]:
        # The windows of the clips' real frames, each padded to `longest` frames, and which rows of the tower's
        # convolution output are real: what the tower computes itself when `longest` is its longest window.
        n_window = self.config.audio_config.n_window
        window = 2 * n_window
        lengths = []
        for frames in mask.sum(-1).tolist():
            lengths += [window] * (frames // window) + ([frames % window] if frames % window else [])
        chunk_lengths = torch.tensor(lengths, dtype=torch.long, device=features.device)
        real_frames = features.permute(0, 2, 1)[mask.bool()]  # (total real frames, mel_bins)
        padded = real_frames.new_zeros(len(lengths), real_frames.shape[-1], longest)  # (windows, mel_bins, frames)
        for index, chunk in enumerate(real_frames.split(lengths)):
            padded[index, :, : chunk.shape[0]] = chunk.T
        rows = int(_get_feat_extract_output_lengths(torch.tensor(longest), n_window))
        real_rows = (
            torch.arange(rows, device=features.device)
            < _get_feat_extract_output_lengths(chunk_lengths, n_window)[:, None]
        )
        valid_indices = real_rows.flatten().nonzero().squeeze(-1)
        return {"padded_feature": padded, "chunk_lengths": chunk_lengths, "valid_indices": valid_indices}
