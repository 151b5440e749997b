"""Muse Glimmer: flattened patches on a (t, h, w) grid, 1D text positions, a Gemma2-like decoder with NoPE layers.

Images come as Qwen2-VL's do (`pixel_values` rows of `patch_temporal * 3 * patch_size**2` values, one
`image_grid_thw` row per image), each image one run of `t * h * w / merge_size**2` placeholders between
`<|image_start|>` and `<|image_end|>`. A video's placeholders come as one run per frame after the frame's timestamp.
The decoder's positions are plain 1D; only the vision config's names differ from Qwen2-VL's (`merge_size`,
`patch_temporal`, RGB hard-coded in the patch embedding).
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout, PatchGridVisionNames


class MuseGlimmerForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.MuseGlimmerForConditionalGeneration
):
    """Drop-in `transformers.MuseGlimmerForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.muse_glimmer import MuseGlimmerForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_muse_glimmer_config
    >>> model = MuseGlimmerForConditionalGeneration(tiny_muse_glimmer_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    multimodal_positions = False
    video_runs_per_frame = True

    vision_config_names = PatchGridVisionNames(
        merge_size="merge_size", temporal_patch_size="patch_temporal", channels=None
    )
