"""ERNIE 4.5 VL MoE: flattened one-frame patches on a (t, h, w) grid, M-RoPE positions, a modality-routed MoE decoder.

`pixel_values` rows are `in_channels * patch_size**2` values with one `image_grid_thw` row per image; an image is one
run of `t * h * w / spatial_merge_size**2` placeholders. The resampler also merges `temporal_merge_size` frames of a
video, so a video is one run of `t * h * w / (spatial_merge_size**2 * temporal_merge_size)` video placeholders
(`Ernie4_5_VLMoeProcessor.replace_video_token`). The decoder's experts are chosen by `moe_mm_token_type_ids` (the
placeholders and their start/end tokens), a per-token input cut with each prefill chunk and part of the prefix keys.
"""

import torch
import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout, PatchGridVisionNames


class Ernie4_5_VLMoeForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.Ernie4_5_VLMoeForConditionalGeneration
):
    """Drop-in `transformers.Ernie4_5_VLMoeForConditionalGeneration` whose vision tower runs once, in input
    preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.ernie4_5_vl_moe import Ernie4_5_VLMoeForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_ernie4_5_vl_moe_config
    >>> model = Ernie4_5_VLMoeForConditionalGeneration(tiny_ernie4_5_vl_moe_config()).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, modality="video")
    [4]

    ```
    """

    # One frame per patch row; the resampler merges a video's frames in pairs instead.
    vision_config_names = PatchGridVisionNames(temporal_patch_size=None)

    def grid_token_counts(self, grid: torch.Tensor, modality: str) -> torch.Tensor:
        """As `PatchGridLayout.grid_token_counts`, except that a video's `temporal_merge_size` frames merge into one."""
        counts = super().grid_token_counts(grid, modality)
        return counts // self.config.vision_config.temporal_merge_size if modality == "video" else counts
