"""Qwen3.5-MoE: Qwen3.5's vision side and hybrid (Gated DeltaNet + attention) decoder, with mixture-of-experts MLPs."""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout


class Qwen3_5MoeForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.Qwen3_5MoeForConditionalGeneration
):
    """Drop-in `transformers.Qwen3_5MoeForConditionalGeneration` whose vision tower runs once, in input preparation.

    Qwen3.5's layout (see `vlmprep.models.qwen3_5`); only the decoder's MLPs differ (mixture of experts).

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.qwen3_5_moe import Qwen3_5MoeForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_qwen3_5_moe_config
    >>> model = Qwen3_5MoeForConditionalGeneration(tiny_qwen3_5_moe_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4]])})
    [4]

    ```
    """

    video_runs_per_frame = True
