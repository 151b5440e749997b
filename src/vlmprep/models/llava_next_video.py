"""LLaVA-NeXT-Video: LLaVA-NeXT's "anyres" images, and videos whose frames are pooled into one placeholder run."""

from dataclasses import replace
from typing import Any

import transformers

from ..generation.facts import ModalityFacts
from .base import VisionPrepMixin
from .layouts.anyres import AnyresCropsLayout


class LlavaNextVideoForConditionalGeneration(
    AnyresCropsLayout, VisionPrepMixin, transformers.LlavaNextVideoForConditionalGeneration
):
    """Drop-in `transformers.LlavaNextVideoForConditionalGeneration` whose vision tower runs once, in input preparation.

    Images as in `vlmprep.models.llava_next`; each video (`pixel_values_videos`, `(num_videos, frames, C, H, W)`) is
    one run of `frames * pooled tokens` placeholders, encoded once by `get_video_features`.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.llava_next_video import LlavaNextVideoForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_llava_next_video_config
    >>> model = LlavaNextVideoForConditionalGeneration(tiny_llava_next_video_config()).eval()
    >>> model.item_token_counts({"image_sizes": torch.tensor([[8, 13]])})
    [14]
    >>> model.count_items({"pixel_values_videos": torch.zeros(2, 4, 3, 8, 8)}, modality="video")
    2
    >>> model.item_token_counts({"pixel_values_videos": torch.zeros(2, 4, 3, 8, 8)}, modality="video")  # 4 * 1
    4

    ```
    """

    # Images as any-res crops. Videos are `(num_videos, frames, C, H, W)`, one entry per video and one run each
    # (their features are checked against the run's length); the model flattens each entry of the video
    # `pooler_output` it is given, so the images' list container suits them too.
    vision_facts = replace(
        AnyresCropsLayout.vision_facts,
        other_modalities=(ModalityFacts("video", "video_token_id", ("pixel_values_videos",)),),
    )

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list[int] | int | None:
        """Placeholders of each image (the layout's), or of a video: each frame's patch grid pooled by the resampler.

        Videos back to back make one placeholder run, which only the count splits (upstream scatters the features in
        order); `LlavaNextVideoProcessor` writes the same count.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (`pixel_values_videos`, for a video's frame count).
            modality (`str`, *optional*, defaults to `"image"`): `"image"` or `"video"`.

        Returns:
            `list[int]`, `int` (every video: one frame count per call), or `None` (no such pixel inputs: one item per
            run)
        """
        if modality != "video":
            return super().item_token_counts(model_kwargs, modality)
        videos = model_kwargs.get("pixel_values_videos")
        if getattr(videos, "ndim", None) != 5:  # none passed, or a shape upstream's `get_video_features` rejects
            return None
        # `LlavaNextVideoPooler`: a (patches, patches) grid per frame, pooled by a kernel of `spatial_pool_stride` at
        # that stride (average, max or conv, unpadded)
        patches = self.config.vision_config.image_size // self.config.vision_config.patch_size
        stride = self.config.spatial_pool_stride
        pooled = (patches - stride) // stride + 1
        return videos.shape[1] * pooled * pooled  # (num_videos, frames, C, H, W)
