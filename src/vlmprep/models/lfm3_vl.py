"""LFM3-VL: flattened patches on a (t, h, w) grid, 1D text positions, a hybrid (conv + attention) LFM3 decoder.

Images come as Qwen2-VL's do (`pixel_values` rows with one `image_grid_thw` row per image), each image one run of
`t * h * w / spatial_merge_size**2` placeholders between the vision start and end tokens. A video's placeholders
come as one run per frame after the frame's timestamp, as Qwen3-VL's do. The decoder's positions are plain 1D.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout


class Lfm3VlForConditionalGeneration(PatchGridLayout, VisionPrepMixin, transformers.Lfm3VlForConditionalGeneration):
    """Drop-in `transformers.Lfm3VlForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.lfm3_vl import Lfm3VlForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_lfm3_vl_config
    >>> model = Lfm3VlForConditionalGeneration(tiny_lfm3_vl_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    multimodal_positions = False
    video_runs_per_frame = True
