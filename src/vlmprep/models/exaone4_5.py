"""EXAONE 4.5: Qwen2.5-VL-like flattened patches on a (t, h, w) grid, with 1D text positions.

Images and videos come as Qwen2-VL's do (`pixel_values` rows with one `image_grid_thw` row per image; videos in
`pixel_values_videos` with `video_grid_thw`), each item one run of `t * h * w / spatial_merge_size**2` placeholders.
The vision tower's rope is 2D inside each image, but the decoder's positions are plain 1D (upstream recomputes them
from the cache length on every forward), so no multimodal positions are needed.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PATCH_GRID_CACHE_POSITIONS_FACTS, PatchGridLayout


class Exaone4_5_ForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.Exaone4_5_ForConditionalGeneration
):
    """Drop-in `transformers.Exaone4_5_ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.exaone4_5 import Exaone4_5_ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_exaone4_5_config
    >>> model = Exaone4_5_ForConditionalGeneration(tiny_exaone4_5_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    multimodal_positions = False

    vision_facts = PATCH_GRID_CACHE_POSITIONS_FACTS
