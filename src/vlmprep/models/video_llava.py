"""Video-LLaVA: LLaVA-like images, one run of CLIP patch tokens each, and videos of whole CLIP frames.

Its image processor returns the images as `pixel_values_images` by default (`return_legacy_image_output=True`) and
as `pixel_values` otherwise; both are the images' pixel inputs, and the tower is always given `pixel_values` (the
legacy name is a deprecated argument of `get_image_features`).

A video (`pixel_values_videos`, `(num_videos, frames, C, H, W)`) is one run of `frames * (patches + 1)` video
placeholders: `get_video_features` runs the video tower on every frame and keeps all its tokens, CLS included,
whatever the feature select strategy, and the model scatters them into the video placeholders in order.
"""

from typing import Any

import transformers

from ..generation import VisionFacts
from ..generation.facts import ModalityFacts
from ..generation.items import ItemSchema, batched
from .base import VisionPrepMixin
from .layouts.vision_patches import VisionPatchesLayout, vision_patch_count

LEGACY_PIXEL_KEY = "pixel_values_images"


class VideoLlavaForConditionalGeneration(
    VisionPatchesLayout, VisionPrepMixin, transformers.VideoLlavaForConditionalGeneration
):
    """Drop-in `transformers.VideoLlavaForConditionalGeneration` whose image and video towers run once, in input
    preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.video_llava import VideoLlavaForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_video_llava_config
    >>> model = VideoLlavaForConditionalGeneration(tiny_video_llava_config()).eval()
    >>> model.item_token_counts({})  # (16 / 4) ** 2 patches; the default strategy drops the CLS token
    16
    >>> model.item_token_counts({"pixel_values_videos": torch.zeros(1, 8, 3, 16, 16)}, modality="video")  # 8 * 17
    136

    ```
    """

    # Fixed-size images, no per-image extras; `pooler_output` is one `(images, tokens, dim)` tensor. The tower is given
    # the images' pixels as `pixel_values` whichever name the processor used. Videos are one `(videos * frames,
    # patches + 1, dim)` tensor, which the mixin splits into one run's rows per video.
    counts_cls_token = True  # the `"full"` feature select strategy keeps CLIP's CLS token
    vision_facts = VisionFacts(
        pixel_keys=("pixel_values", LEGACY_PIXEL_KEY),
        per_image_keys=(),
        image_items=ItemSchema(
            (batched("pixel_values", renamed_from=LEGACY_PIXEL_KEY),), counted_by=("pixel_values",)
        ),
        other_modalities=(ModalityFacts("video", "video_token_index", ("pixel_values_videos",)),),
    )

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """Placeholders of an image (the layout's count), or of a video: each frame's patches and CLS token.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (`pixel_values_videos`, for a video's frame count).
            modality (`str`, *optional*, defaults to `"image"`): `"image"` or `"video"`.

        Returns:
            `int`, or `None` for videos when the call has no video pixels (their runs then give the counts)
        """
        if modality != "video":
            return super().item_token_counts(model_kwargs, modality=modality)
        videos = model_kwargs.get("pixel_values_videos")
        if videos is None:
            return None
        if getattr(videos, "ndim", None) != 5:
            # Upstream's `get_video_features` unpacks five dimensions; a list of videos or a missing axis fails there
            got = tuple(videos.shape) if hasattr(videos, "shape") else type(videos).__name__
            raise ValueError(
                "`pixel_values_videos` must be one tensor of shape (num_videos, frames, channels, height, width), got "
                f"{got}: pass the Video-LLaVA processor's `pixel_values_videos` as it returns them."
            )
        frames = videos.shape[1]  # (num_videos, frames, C, H, W): the processor stacks videos of one frame count
        return frames * (vision_patch_count(self.config) + 1)
