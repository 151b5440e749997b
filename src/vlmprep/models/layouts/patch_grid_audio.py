"""The Qwen-Omni thinkers' layout: Qwen2-VL's patch grids for images and videos, and audio clips, under one
multimodal rope.

Images and videos are flattened patches on a `(t, h, w)` grid, one placeholder run each (between the vision start and
end tokens); a video's `video_second_per_grid` spaces its rope positions in time. An audio clip is log-mel features
`(num_clips, mel_bins, frames)` with a `feature_attention_mask` of its real frames, one run of audio placeholders
(between the audio start and end tokens) whose length the family's audio tower gives. Positions come from the model's
own `get_rope_index` over the whole prompt, never from `rope_deltas` left on the model.

With `use_audio_in_video=True`, a video and its audio track (one clip of `input_features`, in prompt order among the
clips) share one block, `<vision_start><audio_start>`, runs of video and audio placeholders interleaved in time as the
processor writes them, `<audio_end><vision_end>`: each is one item of several runs, read from the prompt; upstream's
`get_rope_index` numbers the block.

Upstream's forwards read encoded images and videos from `mm_encoder_outputs` but encode audio from `input_features`
on every call. So when a forward gets encoded audio rows, it embeds the ids and scatters the rows into the audio
placeholders, exactly as upstream's forward does first, and hands upstream those `inputs_embeds` with the ids (which
place the image and video rows): the audio facts' `AudioPlacement`, read by `EncodedAudioForward`.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import torch

from ...generation.facts import AudioPlacement, ModalityFacts
from ...generation.items import ItemSchema, clip
from ...generation.validation import check_companion_input, check_passed_with
from . import Layout
from .audio import AudioModalityHooks
from .patch_grid import PATCH_GRID_FACTS, PatchGridLayout

__all__ = ["PATCH_GRID_AUDIO_FACTS", "PatchGridAudioLayout"]

_VIDEO = replace(PATCH_GRID_FACTS.modality("video"), position_keys=("video_second_per_grid",))
# A clip is `(mel_bins, frames)` features padded at the end of the frames, with a mask of its real frames; encoded rows
# are placed by the forward in the audio placeholders, upstream places the image and video rows by the ids.
_AUDIO = ModalityFacts(
    "audio",
    "audio_token_id",
    ("input_features",),
    ("feature_attention_mask",),
    items=ItemSchema((clip("input_features", "feature_attention_mask", axis=-1),)),
    placement=AudioPlacement(placed=("audio",), keep_input_ids=True),
)
# The Qwen-Omni thinkers' inputs: Qwen2-VL's images, videos spaced in time by `video_second_per_grid`, audio clips.
PATCH_GRID_AUDIO_FACTS = replace(PATCH_GRID_FACTS, other_modalities=(_VIDEO, _AUDIO))

_VIDEO_WITHOUT_TRACK = (
    "With `use_audio_in_video=True` every video comes with its audio track, interleaved in one block "
    "(`<vision_start><audio_start>`, video and audio placeholders, `<audio_end><vision_end>`, as this model's processor "
    "writes a video whose audio it loads), but the video placeholders at row {row}, position {position} are {where}: "
    "upstream's positions would be wrong. Build the prompt with the processor, or call without `use_audio_in_video`."
)


class PatchGridAudioLayout(AudioModalityHooks, PatchGridLayout):
    """Family hooks of the Qwen-Omni thinkers (listed before `VisionPrepMixin`): patch grids and audio clips.

    A family states how its audio tower counts a clip's placeholders (`audio_placeholder_counts`); the rest is shared.
    """

    layout = Layout(
        "patch_grid_audio",
        "flattened patches on a (t, h, w) grid per image or video, log-mel audio clips, multimodal rope over both",
    )
    vision_facts = PATCH_GRID_AUDIO_FACTS

    def audio_placeholder_counts(self, frames: torch.Tensor) -> list[int]:
        """Audio placeholders of each clip from its real frames (Qwen2.5-Omni's tower: about 4x subsampled).

        Args:
            frames (`torch.Tensor`): `(num_clips,)` real frames of each clip.

        Returns:
            `list[int]`
        """
        return self.model.audio_tower._get_feat_extract_output_lengths(frames)[1].tolist()

    def prompt_item_token_counts(
        self, input_ids: torch.Tensor, model_kwargs: dict[str, Any], modality: str = "image"
    ) -> list | None:
        """`item_token_counts`; with `use_audio_in_video=True`, a video's and a clip's runs, read from the prompt.

        Args:
            input_ids (`torch.Tensor`): the prompt's ids.
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): `"image"`, `"video"` or `"audio"`.

        Returns:
            `list[int | list[int]]` or `None`
        """
        counts = self.item_token_counts(model_kwargs, modality=modality)
        if not model_kwargs.get("use_audio_in_video") or modality == "image":
            return counts
        videos, clips = self._audio_in_video_runs(input_ids)
        pieces = videos if modality == "video" else clips
        for index, (runs, count) in enumerate(zip(pieces, counts or [], strict=False)):
            if sum(runs) != count:
                raise ValueError(
                    f"{modality.capitalize()} {index} has {sum(runs)} placeholder tokens in the prompt but its inputs "
                    f"give {count}. Build the prompt with this model's processor from the same {modality} inputs."
                )
        return pieces

    def _audio_in_video_runs(self, input_ids: torch.Tensor) -> tuple[list[list[int]], list[list[int]]]:
        # The run lengths of each video and of each clip, in prompt order (rows, then positions): a clip after an audio
        # start alone is one run; a block opened by a vision start and an audio start holds a video and its track.
        config = self.config
        video_id, audio_id = config.video_token_id, config.audio_token_id
        videos: list[list[int]] = []
        clips: list[list[int]] = []
        for row, ids in enumerate(input_ids.tolist()):
            position = 0
            while position < len(ids):
                if ids[position] == video_id:
                    where = "not inside such a block"
                    raise ValueError(_VIDEO_WITHOUT_TRACK.format(row=row, position=position, where=where))
                if ids[position] != config.audio_start_token_id:
                    position += 1
                    continue
                in_video = position > 0 and ids[position - 1] == config.vision_start_token_id
                placeholders = (video_id, audio_id) if in_video else (audio_id,)
                end = position + 1
                while end < len(ids) and ids[end] in placeholders:
                    end += 1
                runs = [(token, len(list(group))) for token, group in itertools.groupby(ids[position + 1 : end])]
                clips.append([length for token, length in runs if token == audio_id])
                if in_video:
                    videos.append([length for token, length in runs if token == video_id])
                    if not videos[-1] or not clips[-1]:
                        where = "missing from the block there" if not videos[-1] else "alone in their block"
                        raise ValueError(_VIDEO_WITHOUT_TRACK.format(row=row, position=position, where=where))
                position = end
        return videos, clips

    def audio_token_counts(self, model_kwargs: dict[str, Any]) -> list[int] | None:
        """Placeholders of each audio clip: its subsampled real frames (`audio_placeholder_counts`).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.

        Returns:
            `list[int]` or `None` (without `feature_attention_mask`)
        """
        mask = model_kwargs.get("feature_attention_mask")
        return None if mask is None else self.audio_placeholder_counts(mask.sum(-1))

    def check_audio_inputs(self, model_kwargs: dict[str, Any]) -> None:
        """Raise when audio inputs do not fit the audio tower (`(clips, mel_bins, frames)` with a mask per frame).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
        """
        why = "vlmprep reads each clip's real frames from the mask"
        check_passed_with(model_kwargs, "audio_feature_lengths", "feature_attention_mask", why)
        features, mask = model_kwargs.get("input_features"), model_kwargs.get("feature_attention_mask")
        bins = self.config.audio_config.num_mel_bins
        if features.ndim != 3 or features.shape[1] != bins:
            raise ValueError(
                f"`input_features` has shape {tuple(features.shape)}, which this model's audio tower does not take: "
                f"(num_clips, {bins} mel bins, frames). Extract the features with this model's feature extractor."
            )
        expected, entry = (features.shape[0], features.shape[2]), "one mask entry per frame"
        check_companion_input(
            mask, "feature_attention_mask", expected, "input_features", entry, "the feature extractor"
        )

    def vision_position_ids(self, input_ids: torch.Tensor, model_kwargs: dict[str, Any]) -> torch.Tensor:
        """`(4, batch, seq)` positions of the whole prompt: text positions, then the 3 multimodal rope rows.

        Args:
            input_ids (`torch.Tensor`): the whole prompt.
            model_kwargs (`dict[str, Any]`): the call's inputs (grids, audio mask, mask).

        Returns:
            `torch.Tensor` of shape `(4, batch, seq)`
        """
        attention_mask = model_kwargs.get("attention_mask")
        if attention_mask is None or attention_mask.shape[-1] != input_ids.shape[-1]:
            attention_mask = torch.ones_like(input_ids)  # upstream's `get_rope_index` reads a mask in every case
        text_positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
        audio_mask = model_kwargs.get("feature_attention_mask")
        grids = {key: model_kwargs.get(key) for key in ("image_grid_thw", "video_grid_thw")}
        placeholders = (self.config.image_token_id, self.config.video_token_id)
        for (key, grid), placeholder in zip(grids.items(), placeholders, strict=True):
            if grid is None and bool((input_ids == placeholder).any()):
                raise ValueError(
                    f"The prompt has placeholders of `{key}` but no `{key}`: this model's positions depend on every "
                    "item's grid, also of those already in the cache. Pass the inputs of every item of the prompt."
                )
        if audio_mask is None and bool((input_ids == self.config.audio_token_id).any()):
            raise ValueError(
                "The prompt has audio placeholders but no `feature_attention_mask`: this model's positions depend on "
                "every clip's length, also of those already in the cache. Pass the audio inputs of every clip."
            )
        seconds = model_kwargs.get("video_second_per_grid")
        check_passed_with(model_kwargs, "video_grid_thw", "video_second_per_grid", "it spaces a video's positions")
        mrope, rope_deltas = self.model.get_rope_index(
            input_ids,
            **grids,
            attention_mask=attention_mask,
            use_audio_in_video=bool(model_kwargs.get("use_audio_in_video")),
            audio_seqlens=None if audio_mask is None else audio_mask.sum(-1),
            second_per_grids=seconds,
        )
        # Written, never read: as upstream's generate leaves it; vlmprep's positions never depend on it.
        self.model.rope_deltas = rope_deltas
        # The Qwen3-Omni thinker's rope positions are floats (a video's time may fall between two integers, as with
        # 3 frames a second): kept so, as upstream's generate keeps them
        dtype = mrope.dtype if mrope.is_floating_point() else text_positions.dtype
        return torch.cat([text_positions.unsqueeze(0).to(dtype), mrope.to(dtype)], dim=0)
