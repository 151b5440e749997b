"""MiniMax M3 VL: flattened patches on a (t, h, w) grid, 1D positions, a decoder with sparse attention layers.

Images come as Qwen2-VL's do (`pixel_values` rows, one `image_grid_thw` row per image), each image one run of
`t * h * w / spatial_merge_size**2` placeholders between `]<]start of image[>[` and `]<]end of image[>[`
(`MiniMaxM3VLProcessor.replace_image_token`); a video is one run of video placeholders per frame, each between the
same start and end tokens after the frame's timestamp (`replace_video_token`). The decoder's positions are plain 1D.
Its sparse layers' lightning indexer keeps a key per token in a cache layer of its own
(`MiniMaxM3VLSparseCacheLayer`), which the prefix store holds per token next to the K/V
(`vlmprep.cache.layer_extras`).
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridPerFrameTextPositionsLayout, PatchGridVisionNames


class MiniMaxM3SparseForConditionalGeneration(
    PatchGridPerFrameTextPositionsLayout, VisionPrepMixin, transformers.MiniMaxM3SparseForConditionalGeneration
):
    """Drop-in `transformers.MiniMaxM3SparseForConditionalGeneration` whose vision tower runs once, in input
    preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.minimax_m3_vl import MiniMaxM3SparseForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_minimax_m3_vl_config
    >>> model = MiniMaxM3SparseForConditionalGeneration(tiny_minimax_m3_vl_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    vision_config_names = PatchGridVisionNames(channels="num_channels")
