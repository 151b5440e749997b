"""Qwen3.5: Qwen3-VL's inputs (flattened patches, one `image_grid_thw` row per image, per-frame video runs, multimodal
rope) without deepstack, on a hybrid decoder whose Gated DeltaNet layers keep a recurrent state instead of KV.

The recurrent and convolution states live in transformers' own cache layers (`LinearAttentionLayer`), which carry them
from one prefill chunk to the next; the prefix cache stores snapshots of them (docs/prefix_cache.md).
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout


class Qwen3_5ForConditionalGeneration(PatchGridLayout, VisionPrepMixin, transformers.Qwen3_5ForConditionalGeneration):
    """Drop-in `transformers.Qwen3_5ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.qwen3_5 import Qwen3_5ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_qwen3_5_config
    >>> model = Qwen3_5ForConditionalGeneration(tiny_qwen3_5_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    video_runs_per_frame = True
