"""Qwen3-VL: Qwen2-VL's inputs and positions, videos as one placeholder run per frame, and deepstack features."""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout


class Qwen3VLForConditionalGeneration(PatchGridLayout, VisionPrepMixin, transformers.Qwen3VLForConditionalGeneration):
    """Drop-in `transformers.Qwen3VLForConditionalGeneration` whose vision tower runs once, in input preparation.

    The vision tower's deepstack features (added to the first text layers' hidden states at the placeholders) are
    kept with each image's features and fed to the same placeholders, chunk by chunk.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.qwen3_vl import Qwen3VLForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_qwen3_vl_config
    >>> model = Qwen3VLForConditionalGeneration(tiny_qwen3_vl_config()).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, modality="video")
    [[4, 4]]

    ```
    """

    video_runs_per_frame = True
