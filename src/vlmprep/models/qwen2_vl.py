"""Qwen2-VL: images and videos as flattened patches on a (t, h, w) grid, and multimodal rope (M-RoPE) positions."""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout


class Qwen2VLForConditionalGeneration(PatchGridLayout, VisionPrepMixin, transformers.Qwen2VLForConditionalGeneration):
    """Drop-in `transformers.Qwen2VLForConditionalGeneration` whose vision tower runs once, in input preparation.

    Images and videos are encoded once each, only when prefill needs them; positions come from the prompt alone, so
    a cached conversation can get new images and requests can interleave.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.qwen2_vl import Qwen2VLForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_qwen2_vl_config
    >>> model = Qwen2VLForConditionalGeneration(tiny_qwen2_vl_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """
