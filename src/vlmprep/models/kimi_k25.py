"""Kimi K2.5: images and video chunks as patches on a (t, h, w) grid, frames pooled into one, 1D text positions.

`pixel_values` holds one `(3, patch, patch)` image per patch (the tower's convolutional embedding), with one
`image_grid_thw` row per image; the processor cuts a video into chunks of `temporal_patch_size` frames, each a
`video_grid_thw` row and one run of video placeholders after its timestamp (`Kimi_K25Processor.replace_video_token`).
The tower pools a chunk's frames into one (`temporal_merge`), so an item of grid `(t, h, w)` fills
`h * w / (kernel_h * kernel_w)` placeholders whatever its `t`. The decoder (DeepSeek-V3's) has plain 1D positions.
"""

import torch
import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout, PatchGridVisionNames


class Kimi_K25ForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.Kimi_K25ForConditionalGeneration
):
    """Drop-in `transformers.Kimi_K25ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.kimi_k25 import Kimi_K25ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_kimi_k25_config
    >>> model = Kimi_K25ForConditionalGeneration(tiny_kimi_k25_config()).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, modality="video")
    [4]

    ```
    """

    multimodal_positions = False

    # One frame per patch, kept as a small RGB image for the convolutional patch embedding.
    vision_config_names = PatchGridVisionNames(
        merge_size="merge_kernel_size", temporal_patch_size=None, channels=None, flat_patches=False
    )

    def grid_token_counts(self, grid: torch.Tensor, modality: str) -> torch.Tensor:
        """Placeholders of each item (`PatchGridLayout.grid_token_counts`): its grid's `h * w` over the merge kernel's
        area; the frames are pooled into one."""
        kernel_height, kernel_width = self.config.vision_config.merge_kernel_size
        return grid[:, 1:].prod(-1) // (kernel_height * kernel_width)
