"""VideoLLaMA3: single-frame patches on a (t, h, w) grid with a merge size per item, a Qwen2 decoder with 1D
positions; a video is one run per frame of the patches its compression mask keeps (`layouts.merge_sized_grid`)."""

import transformers

from .base import VisionPrepMixin
from .layouts.merge_sized_grid import MergeSizedGridLayout


class VideoLlama3ForConditionalGeneration(
    MergeSizedGridLayout, VisionPrepMixin, transformers.VideoLlama3ForConditionalGeneration
):
    """Drop-in `transformers.VideoLlama3ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Upstream drops the rows `video_compression_mask` marks from the whole call's video features at every forward;
    here each video's rows are dropped once, when it is encoded, so a video's features are the same in any call.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.video_llama_3 import VideoLlama3ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_video_llama_3_config
    >>> model = VideoLlama3ForConditionalGeneration(tiny_video_llama_3_config()).eval()
    >>> grids = {"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]]), "image_merge_sizes": torch.tensor([2, 1])}
    >>> model.item_token_counts(grids)
    [4, 8]

    ```
    """
