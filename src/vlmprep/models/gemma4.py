"""Gemma 4: images, videos and audio clips, each encoded once.

An image is one run of soft tokens: its patch rows (`pixel_values`, padded to the processor's patch budget, with their
`(x, y)` positions in `image_position_ids`, `(-1, -1)` on padding) pooled `pooling_kernel_size**2` to one. A video is
one run per frame, each frame an image of its own (`pixel_values_videos`, `video_position_ids`, frames of every video
concatenated and split by `num_frames_per_video`). An audio clip is one run of its log-mel frames (`input_features`,
`input_features_mask`) subsampled 4x. With `use_bidirectional_attention="vision"`, each run of image and video soft
tokens (`mm_token_type_ids` 1 and 2) attends to itself bidirectionally on the sliding layers: a block.

Upstream's forward reads encoded images and videos from `mm_encoder_outputs` but encodes audio from `input_features`
on every call, with no way to take it encoded. So when a forward gets audio rows, the drop-in builds its input
embeddings itself, exactly as upstream's forward does (placeholders embedded as padding, per-layer inputs from the
padded ids, each modality's rows scattered into its placeholders), and hands upstream `inputs_embeds`: the audio
facts' placement.
"""

from typing import Any

import torch
import transformers

from ..generation.facts import AudioPlacement, ModalityFacts, VisionFacts
from ..generation.items import ItemSchema, Sizes, clip, flat, sizes
from ..generation.validation import check_companion_input, check_passed_with
from .base import VisionPrepMixin
from .layouts.audio import EncodedAudioForward, check_audio_tower
from .layouts.stated_counts import PATCH_ROWS_AND_AUDIO

# The frames of every video back to back (their pixels and positions), split per video by `num_frames_per_video`.
_FRAMES = Sizes("num_frames_per_video")
_VIDEO = ModalityFacts(
    "video",
    "video_token_id",
    ("pixel_values_videos",),
    ("video_position_ids", "num_frames_per_video"),
    items=ItemSchema(
        (flat("pixel_values_videos", _FRAMES), flat("video_position_ids", _FRAMES), sizes("num_frames_per_video")),
        counted_by=("pixel_values_videos",),
    ),
)
# The audio tower pads a batch of clips to the longest and marks its real rows in `attention_mask`. Encoded rows are
# placed as `transformers.Gemma4Model.forward` places every modality's: placeholders embedded as the pad token,
# per-layer inputs from those ids, then each modality's rows scattered in.
_AUDIO = ModalityFacts(
    "audio",
    "audio_token_id",
    ("input_features",),
    ("input_features_mask",),
    output_mask_attr="attention_mask",
    items=ItemSchema((clip("input_features", "input_features_mask", axis=1),)),
    placement=AudioPlacement(
        placed=("image", "video", "audio"), placeholders_embedded_as="text_config.pad_token_id", per_layer_inputs=True
    ),
)


class Gemma4ForConditionalGeneration(
    EncodedAudioForward, VisionPrepMixin, transformers.Gemma4ForConditionalGeneration
):
    """Drop-in `transformers.Gemma4ForConditionalGeneration` whose vision and audio towers run once, in input
    preparation.

    Example:

    ```python
    >>> from vlmprep.models.gemma4 import Gemma4ForConditionalGeneration
    >>> [m.name for m in Gemma4ForConditionalGeneration.vision_facts.modalities]
    ['image', 'video', 'audio']

    ```
    """

    layout = PATCH_ROWS_AND_AUDIO
    vision_facts = VisionFacts(
        bidirectional="image",
        token_type_key="mm_token_type_ids",
        per_image_keys=("image_position_ids",),
        pixel_layout=None,
        features_as_list=True,
        other_modalities=(_VIDEO, _AUDIO),
        modality_token_types=(("image", 1), ("video", 2), ("audio", 3)),
        block_token_types=(1, 2),
    )

    def block_layer_types(self) -> tuple[str, ...]:
        """The sliding layers under `use_bidirectional_attention="vision"` (full layers stay causal), else none.

        Returns:
            `tuple[str, ...]`
        """
        vision = getattr(self.config.get_text_config(), "use_bidirectional_attention", None) == "vision"
        return ("sliding_attention",) if vision else ()

    def _soft_tokens(self, position_ids: torch.Tensor) -> torch.Tensor:
        # Real patches (positions not `(-1, -1)`) pooled `pooling_kernel_size**2` to one soft token: per image/frame
        real_patches = (position_ids != -1).all(dim=-1).sum(dim=-1)
        return real_patches // self.config.vision_config.pooling_kernel_size**2

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list | None:
        """Soft tokens of each item: an image's pooled real patches, a video's per frame, an audio clip's frames after
        two stride-2 subsamplings (the processor's arithmetic on `input_features_mask`).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): `"image"`, `"video"` or `"audio"`.

        Returns:
            `list` (one count per image or clip, a list of frame counts per video), or `None` without the inputs.
        """
        if modality == "audio":
            mask = model_kwargs.get("input_features_mask")
            if mask is None:
                return None
            # Each subsampling keeps every other frame of the mask, `(frames - 1) // 2 + 1` of them
            return [int(clip_mask[::2][::2].sum()) for clip_mask in mask.bool()]
        key = "image_position_ids" if modality == "image" else "video_position_ids"
        if model_kwargs.get(key) is None:
            return None
        counts = self._soft_tokens(model_kwargs[key]).tolist()
        if modality == "image":
            return counts
        frames = model_kwargs.get("num_frames_per_video")
        if frames is None:
            return None
        splits = torch.tensor(counts).split(torch.as_tensor(frames).tolist())
        return [piece.tolist() for piece in splits]

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise when an item's inputs do not fit its tower: patch rows of `3 * patch_size**2` values with one
        `(x, y)` position each, or audio frames of the mel bins the audio tower's projection takes.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): whose inputs to check.
        """
        if modality == "audio":
            features, tower = model_kwargs.get("input_features"), self.model.audio_tower
            check_audio_tower(tower, "Gemma 4")
            # Two stride-2 convolutions halve the mel bins twice; the projection reads `channels * bins / 4` values
            width = tower.config.subsampling_conv_channels[-1]
            expected = tower.subsample_conv_projection.input_proj_linear.in_features
            if features.ndim != 3 or (((features.shape[-1] + 1) // 2 + 1) // 2) * width != expected:
                raise ValueError(
                    f"`input_features` has shape {tuple(features.shape)}, which this model's audio tower does not "
                    f"take: (num_clips, frames, mel_bins) with {expected // width * 4} mel bins. Extract the features "
                    "with this model's feature extractor."
                )
            return
        pixel_key, position_key = ("pixel_values", "image_position_ids")
        if modality == "video":
            pixel_key, position_key = ("pixel_values_videos", "video_position_ids")
            why = "it splits the frames of every video, concatenated, per video"
            check_passed_with(model_kwargs, pixel_key, "num_frames_per_video", why)
        pixels, positions = model_kwargs.get(pixel_key), model_kwargs.get(position_key)
        patch_dim = 3 * self.config.vision_config.patch_size**2
        if pixels.ndim != 3 or pixels.shape[-1] != patch_dim:
            raise ValueError(
                f"`{pixel_key}` has shape {tuple(pixels.shape)} but this model's vision tower takes (num_images, "
                f"max_patches, {patch_dim}): rows of flattened RGB patches. Preprocess with this model's processor."
            )
        expected = (*pixels.shape[:2], 2)
        check_companion_input(positions, position_key, expected, pixel_key, "one (x, y) position per patch row")
