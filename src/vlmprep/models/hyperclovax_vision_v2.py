"""HyperCLOVAX-Vision v2: a Qwen2.5-VL vision tower (flattened patches on a (t, h, w) grid), 1D text positions.

Images and videos come as Qwen2-VL's do (`pixel_values` rows with one `image_grid_thw` row per image; videos in
`pixel_values_videos` with `video_grid_thw`), each item one run of `t * h * w / spatial_merge_size**2` placeholders;
the decoder's positions are plain 1D (upstream recomputes them on every forward), as in EXAONE 4.5.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PATCH_GRID_CACHE_POSITIONS_FACTS, PatchGridLayout


class HyperCLOVAXVisionV2ForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.HyperCLOVAXVisionV2ForConditionalGeneration
):
    """Drop-in `transformers.HyperCLOVAXVisionV2ForConditionalGeneration`; its vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.hyperclovax_vision_v2 import HyperCLOVAXVisionV2ForConditionalGeneration
    >>> HyperCLOVAXVisionV2ForConditionalGeneration.vision_facts.positions_from_cache_length  # as EXAONE 4.5
    True

    ```
    """

    multimodal_positions = False

    vision_facts = PATCH_GRID_CACHE_POSITIONS_FACTS
