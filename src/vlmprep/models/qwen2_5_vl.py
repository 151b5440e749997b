"""Qwen2.5-VL: Qwen2-VL's inputs and M-RoPE positions (videos spaced in time by `second_per_grid_ts`)."""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout


class Qwen2_5_VLForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.Qwen2_5_VLForConditionalGeneration
):
    """Drop-in `transformers.Qwen2_5_VLForConditionalGeneration` whose vision tower runs once, in input preparation.

    Qwen2-VL's layout (see `vlmprep.models.qwen2_vl`). Its windowed vision tower changes nothing here: images and
    videos are still flattened patches with a grid each, and `second_per_grid_ts` reaches the model's own
    `get_rope_index` with the grids.

    Example:

    ```python
    >>> from vlmprep.models.qwen2_5_vl import Qwen2_5_VLForConditionalGeneration
    >>> [(m.name, m.pixel_keys, m.per_item_keys) for m in Qwen2_5_VLForConditionalGeneration.vision_facts.modalities]
    [('image', ('pixel_values',), ('image_grid_thw',)), ('video', ('pixel_values_videos',), ('video_grid_thw',))]

    ```
    """
