"""Qwen3-VL-MoE: Qwen3-VL's vision side (flattened patches, per-frame video runs, deepstack) on a MoE decoder."""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout


class Qwen3VLMoeForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.Qwen3VLMoeForConditionalGeneration
):
    """Drop-in `transformers.Qwen3VLMoeForConditionalGeneration` whose vision tower runs once, in input preparation.

    Qwen3-VL's layout (see `vlmprep.models.qwen3_vl`); only the decoder differs (mixture of experts).

    Example:

    ```python
    >>> from vlmprep.models.qwen3_vl_moe import Qwen3VLMoeForConditionalGeneration
    >>> Qwen3VLMoeForConditionalGeneration.layout.name  # a video: one run per frame
    'patch_grid_per_frame'

    ```
    """

    video_runs_per_frame = True
