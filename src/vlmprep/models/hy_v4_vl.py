"""HY-V4-VL: single-frame patches on a (t, h, w) grid, an item's run holding a newline after each merged row; the
model's own multimodal rope; a decoder of indexed-attention layers (an indexer's keys per token in the cache, held by
the prefix store: `vlmprep.cache.layer_extras`) with hyper-connection streams."""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridVisionNames
from .layouts.patch_grid_row_separated import PatchGridRowSeparatedLayout


class HYV4VLForConditionalGeneration(
    PatchGridRowSeparatedLayout, VisionPrepMixin, transformers.HYV4VLForConditionalGeneration
):
    """Drop-in `transformers.HYV4VLForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.hy_v4_vl import HYV4VLForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_hy_v4_vl_config
    >>> model = HYV4VLForConditionalGeneration(tiny_hy_v4_vl_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})  # 2 rows of 2 + newline
    [6, 3]

    ```
    """

    vision_config_names = PatchGridVisionNames(temporal_patch_size=None, channels="num_channels")
