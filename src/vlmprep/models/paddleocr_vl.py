"""PaddleOCR-VL: images only, as patches on a (t, h, w) grid with multimodal rope (M-RoPE) positions.

`pixel_values` holds one `(3, patch, patch)` image per patch, `(total_patches, 3, patch, patch)`, for the tower's
convolutional patch embedding, with one `image_grid_thw` row per image; an image is one run of
`t * h * w / spatial_merge_size**2` placeholders, and `mm_token_type_ids` (which the processor returns) marks them.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PATCH_GRID_IMAGE_ONLY_FACTS, PatchGridLayout, PatchGridVisionNames


class PaddleOCRVLForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.PaddleOCRVLForConditionalGeneration
):
    """Drop-in `transformers.PaddleOCRVLForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.paddleocr_vl import PaddleOCRVLForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_paddleocr_vl_config
    >>> model = PaddleOCRVLForConditionalGeneration(tiny_paddleocr_vl_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    vision_facts = PATCH_GRID_IMAGE_ONLY_FACTS
    # One frame per patch, kept as a small image for the convolutional patch embedding.
    vision_config_names = PatchGridVisionNames(temporal_patch_size=None, channels="num_channels", flat_patches=False)
