"""GLM-4V: Qwen2-VL-like inputs and M-RoPE positions; video frames reuse the image placeholder token."""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PATCH_GRID_SHARED_PLACEHOLDER_FACTS, PatchGridLayout


class Glm4vForConditionalGeneration(PatchGridLayout, VisionPrepMixin, transformers.Glm4vForConditionalGeneration):
    """Drop-in `transformers.Glm4vForConditionalGeneration` whose vision tower runs once, in input preparation.

    Images and videos are flattened patches with a `(t, h, w)` grid each; a video has one placeholder run per frame.
    As upstream, one forward cannot hold both image and video placeholders (the model finds both by one token id).

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.glm4v import Glm4vForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_glm4v_config
    >>> model = Glm4vForConditionalGeneration(tiny_glm4v_config()).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, modality="video")
    [[4, 4]]

    ```
    """

    video_runs_per_frame = True

    # Video frames reuse the image placeholder: `mm_token_type_ids` (1 image, 2 video) tells them apart.
    vision_facts = PATCH_GRID_SHARED_PLACEHOLDER_FACTS
