"""Nemotron-H Omni (`NemotronH_Omni_Reasoning_V3`): images and audio clips, each encoded once; videos refused.

An image is flattened `num_channels * patch_size**2` patches (every image's patches back to back in `pixel_values`)
on an `image_grid_hw` `(h, w)` grid, pixel-shuffled by `1 / downsample_ratio` into one run of
`h * w / merge**2` placeholders between `<img>` and `</img>` (`replace_image_token`); the RADIO tower attends within
each image. An audio clip is Parakeet log-mel frames `(clips, frames, mel_bins)` with `input_features_mask` of its
real frames; it fills `subsampled(real + 1)` placeholders, as many as the tower gives for the clip padded to the
call's frames (its last rows depend on that padding, so a clip is encoded padded as given, never cut). The decoder is
Nemotron-H's: mamba layers (transformers' linear-attention cache layers), attention and MoE layers; positions 1D.

transformers' class keeps its encoders on itself (no `model`), and its forward reads encoded images from
`mm_encoder_outputs` but encodes audio from `input_features` on every call: when a forward gets encoded audio rows,
the drop-in embeds the ids and scatters image and audio rows itself, exactly as upstream's forward does (the audio
facts' placement). A video's
frames reuse the image placeholder with no token types to tell them apart, and `video_pruning_rate` drops tokens
inside the forward: videos are refused, not supported yet.
"""

from typing import Any

import torch
import transformers

from ..generation.facts import AudioPlacement, ModalityFacts, VisionFacts
from ..generation.items import grid_rows
from ..generation.validation import check_companion_input, check_passed_with
from .base import VisionPrepMixin
from .layouts.audio import EncodedAudioForward, check_audio_tower
from .layouts.patch_items_and_audio import PATCH_GRID_HW_AND_PADDED_AUDIO

# A clip's features and mask are encoded as the call pads them (one entry per clip of each). Encoded rows are placed as
# upstream's forward places them: the ids embedded, the image and audio rows scattered in, the ids kept.
_AUDIO = ModalityFacts(
    "audio",
    "audio_token_id",
    ("input_features",),
    ("input_features_mask",),
    placement=AudioPlacement(placed=("image", "audio"), keep_input_ids=True),
)
_VIDEOS = (
    "Videos are not supported by vlmprep's Nemotron-H Omni yet (their frames reuse the image placeholder, and "
    "`video_pruning_rate` drops tokens inside the forward): use `transformers.NemotronH_Omni_Reasoning_V3` for them."
)


class NemotronH_Omni_Reasoning_V3(EncodedAudioForward, VisionPrepMixin, transformers.NemotronH_Omni_Reasoning_V3):
    """Drop-in `transformers.NemotronH_Omni_Reasoning_V3` whose vision and audio towers run once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3
    >>> from vlmprep.testing.configs import tiny_nemotron_h_omni_config
    >>> model = NemotronH_Omni_Reasoning_V3(tiny_nemotron_h_omni_config()).eval()
    >>> model.item_token_counts({"image_grid_hw": torch.tensor([[4, 4], [2, 4]])})  # pixel-shuffled 2x2
    [4, 2]

    ```
    """

    # An image's patches are its `h * w` rows of the flattened patches
    layout = PATCH_GRID_HW_AND_PADDED_AUDIO
    vision_facts = VisionFacts(
        per_image_keys=("image_grid_hw",),
        image_items=grid_rows("pixel_values", "image_grid_hw"),
        pixel_layout=None,
        features_as_list=True,
        other_modalities=(_AUDIO,),
    )

    def _merge(self) -> int:
        return round(1 / self.config.downsample_ratio)

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list | None:
        """Placeholders of each item: an image's pixel-shuffled grid; a clip's subsampled real frames plus one, at
        most what the tower gives for the call's padded frames (upstream's arithmetic).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): `"image"` or `"audio"`.

        Returns:
            `list[int]` or `None` (without the inputs that give the counts)
        """
        if model_kwargs.get("pixel_values_videos") is not None:  # counted first for every modality: refused first
            raise ValueError(_VIDEOS)
        if modality == "audio":
            features, mask = model_kwargs.get("input_features"), model_kwargs.get("input_features_mask")
            if features is None or self.audio_tower is None:
                return None
            subsampled = self.audio_tower._get_subsampling_output_length
            most = int(subsampled(torch.tensor([features.shape[1]]))[0])
            if mask is None:
                return [most] * features.shape[0]
            return [min(int(rows), most) for rows in subsampled(mask.sum(-1) + 1)]
        grids = model_kwargs.get("image_grid_hw")
        return None if grids is None else (grids.prod(-1) // self._merge() ** 2).tolist()

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise when patches or audio features do not fit the towers.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): whose inputs to check.
        """
        if modality == "audio":
            features, mask = model_kwargs.get("input_features"), model_kwargs.get("input_features_mask")
            check_audio_tower(self.audio_tower, "Nemotron-H Omni")
            bins = self.config.audio_config.num_mel_bins
            if features.ndim != 3 or features.shape[-1] != bins:
                raise ValueError(
                    f"`input_features` has shape {tuple(features.shape)}, which this model's audio tower does not "
                    f"take: (num_clips, frames, {bins} mel bins). Extract the features with this model's processor."
                )
            expected, entry = tuple(features.shape[:2]), "one entry per frame"
            check_companion_input(mask, "input_features_mask", expected, "input_features", entry, required=False)
            return
        why = "it splits the flattened patches of every image per image"
        check_passed_with(model_kwargs, "pixel_values", "image_grid_hw", why)
        pixels, grids = model_kwargs.get("pixel_values"), model_kwargs.get("image_grid_hw")
        width = self.config.vision_config.num_channels * self.config.vision_config.patch_size**2
        if pixels.ndim != 2 or pixels.shape[-1] != width:
            raise ValueError(
                f"`pixel_values` has shape {tuple(pixels.shape)} but this model's vision tower takes flattened "
                f"patches (patches, {width}). Preprocess the images with this model's processor."
            )
        if int(grids.prod(-1).sum()) != pixels.shape[0]:
            raise ValueError(
                f"`pixel_values` holds {pixels.shape[0]} patches but `image_grid_hw` describes "
                f"{int(grids.prod(-1).sum())}: pass the grids the image processor returned with the pixels."
            )

    def check_forward_inputs(self, args: tuple, kwargs: dict[str, Any]) -> None:
        """Raise for videos, which the drop-in does not take yet.

        Args:
            args (`tuple`): the forward's positional arguments.
            kwargs (`dict[str, Any]`): its keyword arguments.
        """
        if kwargs.get("pixel_values_videos") is not None:
            raise ValueError(_VIDEOS)
