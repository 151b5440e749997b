"""Video-LLaVA (images): LLaVA-like images, one run of CLIP patch tokens each; videos are not prepared by vlmprep.

Its image processor returns the images as `pixel_values_images` by default (`return_legacy_image_output=True`) and
as `pixel_values` otherwise; both are the images' pixel inputs, and the tower is always given `pixel_values` (the
legacy name is a deprecated argument of `get_image_features`).
"""

from typing import Any

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.vision_patches import VisionPatchesLayout

LEGACY_PIXEL_KEY = "pixel_values_images"
_VIDEOS = (
    "Videos are not prepared by vlmprep's Video-LLaVA (only its images are; upstream's forward refuses videos next to "
    "prepared images): use `transformers.VideoLlavaForConditionalGeneration` for prompts with `pixel_values_videos`."
)


class VideoLlavaForConditionalGeneration(
    VisionPatchesLayout, VisionPrepMixin, transformers.VideoLlavaForConditionalGeneration
):
    """Drop-in `transformers.VideoLlavaForConditionalGeneration` whose image tower runs once, in input preparation.

    Images only; `pixel_values_videos` are not prepared by vlmprep.

    Example:

    ```python
    >>> from vlmprep.models.video_llava import VideoLlavaForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_video_llava_config
    >>> model = VideoLlavaForConditionalGeneration(tiny_video_llava_config()).eval()
    >>> model.item_token_counts({})  # (16 / 4) ** 2 patches; the default strategy drops the CLS token
    16

    ```
    """

    # Fixed-size images, no per-image extras; `pooler_output` is one `(images, tokens, dim)` tensor. The tower is given
    # the images' pixels as `pixel_values` whichever name the processor used.
    counts_cls_token = True  # the `"full"` feature select strategy keeps CLIP's CLS token
    vision_facts = VisionFacts(
        pixel_keys=("pixel_values", LEGACY_PIXEL_KEY),
        per_image_keys=(),
        renamed_pixel_keys=((LEGACY_PIXEL_KEY, "pixel_values"),),
    )

    def count_items(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """Images, as any family counts them; videos are refused (clearly, not as upstream's error deep in prefill).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): whose items to count.

        Returns:
            `int` or `None` (no pixel inputs)
        """
        if model_kwargs.get("pixel_values_videos") is not None:
            raise ValueError(_VIDEOS)
        return super().count_items(model_kwargs, modality=modality)
