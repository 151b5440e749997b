"""HunYuanVL: images as single-frame patches on a (t, h, w) grid; an image's run also holds its row separators and
its begin and end embeddings, and its positions are HunYuan's multimodal rope axes (width, height, image index)."""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PATCH_GRID_IMAGE_ONLY_FACTS, PatchGridVisionNames
from .layouts.patch_grid_framed import PatchGridFramedLayout


class HunYuanVLForConditionalGeneration(
    PatchGridFramedLayout, VisionPrepMixin, transformers.HunYuanVLForConditionalGeneration
):
    """Drop-in `transformers.HunYuanVLForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.hunyuan_vl import HunYuanVLForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_hunyuan_vl_config
    >>> model = HunYuanVLForConditionalGeneration(tiny_hunyuan_vl_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [8, 5]

    ```
    """

    vision_facts = PATCH_GRID_IMAGE_ONLY_FACTS
    vision_config_names = PatchGridVisionNames(temporal_patch_size=None, channels="num_channels")
