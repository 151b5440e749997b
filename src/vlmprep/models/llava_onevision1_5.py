"""LLaVA-OneVision-1.5: EXAONE 4.5's body (Qwen2.5-VL-like patch grids, 1D text positions) with a RICE-ViT tower.

Images and videos come as EXAONE 4.5's do (`pixel_values` rows with one `image_grid_thw` row per image; videos in
`pixel_values_videos` with `video_grid_thw`), each item one run of `t * h * w / spatial_merge_size**2` placeholders
(the processor is Qwen2-VL's). The RICE-ViT tower reads one frame per patch (its config has no
`temporal_patch_size`: a row is `in_channels * patch_size**2`) and prepends a class token to each frame, which it drops
again before merging, so an item's features depend on its own pixels only. Positions are transformers' 1D generation
positions (from the attention mask), which the decoder reads as given.
"""

import transformers

if not hasattr(transformers, "LlavaOnevision15ForConditionalGeneration"):  # added by transformers 5.25
    raise ImportError(
        f"vlmprep's LlavaOnevision15ForConditionalGeneration needs transformers>=5.25 (installed: "
        f"{transformers.__version__}), whose class it extends: upgrade transformers to load LLaVA-OneVision-1.5."
    )

from .base import VisionPrepMixin  # noqa: E402 (after the version check, which names what is missing)
from .layouts.patch_grid import PatchGridLayout, PatchGridVisionNames  # noqa: E402


class LlavaOnevision15ForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.LlavaOnevision15ForConditionalGeneration
):
    """Drop-in `transformers.LlavaOnevision15ForConditionalGeneration` whose vision tower runs once, in input
    preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.llava_onevision1_5 import LlavaOnevision15ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_llava_onevision1_5_config
    >>> model = LlavaOnevision15ForConditionalGeneration(tiny_llava_onevision1_5_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    multimodal_positions = False

    # One frame per patch: a pixel row is `in_channels * patch_size**2` (the layout reads no temporal patch)
    vision_config_names = PatchGridVisionNames(temporal_patch_size=None)
