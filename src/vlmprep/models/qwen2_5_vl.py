"""Qwen2.5-VL: Qwen2-VL's inputs and M-RoPE positions (videos spaced in time by `second_per_grid_ts`)."""

from dataclasses import replace

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PATCH_GRID_FACTS, PatchGridLayout

# Qwen2-VL's inputs; a video's `second_per_grid_ts` (seconds between its temporal patches) spaces its rope positions.
_VIDEO = replace(PATCH_GRID_FACTS.modality("video"), position_keys=("second_per_grid_ts",))


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

    vision_facts = replace(PATCH_GRID_FACTS, other_modalities=(_VIDEO,))
