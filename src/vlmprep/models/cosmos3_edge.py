"""Cosmos3 Edge: images and videos as flattened one-frame patches on a (t, h, w) grid, multimodal rope positions.

`pixel_values` rows are `num_channels * patch_size**2` values (the tower reads one frame per patch), with one
`image_grid_thw` row per image; an image is one run of `t * h * w / spatial_merge_size**2` image placeholders. A
video is one run of `h * w / spatial_merge_size**2` video placeholders per frame, each after its timestamp text and
between vision start and end tokens (`Cosmos3EdgeProcessor.replace_video_token`), as Qwen3-VL's.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout, PatchGridVisionNames


class Cosmos3EdgeForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.Cosmos3EdgeForConditionalGeneration
):
    """Drop-in `transformers.Cosmos3EdgeForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.cosmos3_edge import Cosmos3EdgeForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_cosmos3_edge_config
    >>> model = Cosmos3EdgeForConditionalGeneration(tiny_cosmos3_edge_config()).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, modality="video")
    [[4, 4]]

    ```
    """

    video_runs_per_frame = True

    # One frame per patch (a video's temporal grid counts frames); the channels are the SigLIP tower's.
    vision_config_names = PatchGridVisionNames(temporal_patch_size=None, channels="num_channels")
