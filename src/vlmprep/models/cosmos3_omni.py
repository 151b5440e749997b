"""Cosmos3 Omni (the reasoner): Qwen3-VL's images and videos, multimodal rope positions and deepstack features.

transformers' class is the reasoner alone: it builds Qwen3-VL's vision tower and text decoder from its sub-configs and
drops the sound, action and generator towers of a unified checkpoint when loading, so its inputs are images and
videos only (no audio input). `pixel_values` rows are flattened `temporal_patch_size * channels * patch_size**2`
patches with one `image_grid_thw` row per image, an image one run of `t * h * w / spatial_merge_size**2` image
placeholders; a video is one run per frame after its timestamp text, between vision start and end tokens, as
Qwen3-VL's. Positions come from the model's own `get_rope_index` over the whole prompt.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout


class Cosmos3OmniForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.Cosmos3OmniForConditionalGeneration
):
    """Drop-in `transformers.Cosmos3OmniForConditionalGeneration` whose vision tower runs once, in input preparation.

    The vision tower's deepstack features are kept with each image's features and fed to the same placeholders,
    chunk by chunk, as for Qwen3-VL.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.cosmos3_omni import Cosmos3OmniForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_cosmos3_omni_config
    >>> model = Cosmos3OmniForConditionalGeneration(tiny_cosmos3_omni_config()).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, modality="video")
    [[4, 4]]

    ```
    """

    video_runs_per_frame = True
