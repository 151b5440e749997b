"""LLaVA-NeXT-Video: LLaVA-NeXT's "anyres" images, and videos whose frames are pooled into one placeholder run."""

from dataclasses import replace

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

    ```
    """

    # Images as any-res crops. Videos are `(num_videos, frames, C, H, W)`, one entry per video and one run each
    # (their features are checked against the run's length); the model flattens each entry of the video
    # `pooler_output` it is given, so the images' list container suits them too.
    vision_facts = replace(
        AnyresCropsLayout.vision_facts,
        other_modalities=(ModalityFacts("video", "video_token_id", ("pixel_values_videos",)),),
    )
