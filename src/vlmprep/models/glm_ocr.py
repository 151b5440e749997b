"""GLM-OCR: GLM-4V's inputs and M-RoPE positions (a smaller tower with q/k norms); video frames reuse the image
placeholder token."""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PATCH_GRID_SHARED_PLACEHOLDER_FACTS, PatchGridLayout


class GlmOcrForConditionalGeneration(PatchGridLayout, VisionPrepMixin, transformers.GlmOcrForConditionalGeneration):
    """Drop-in `transformers.GlmOcrForConditionalGeneration` whose vision tower runs once, in input preparation.

    Images and videos are flattened patches with a `(t, h, w)` grid each, as GLM-4V's; a video has one placeholder run
    per frame, of image placeholders told apart by `mm_token_type_ids`.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.glm_ocr import GlmOcrForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_glm_ocr_config
    >>> model = GlmOcrForConditionalGeneration(tiny_glm_ocr_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    video_runs_per_frame = True

    # Video frames reuse the image placeholder: `mm_token_type_ids` (1 image, 2 video) tells them apart.
    vision_facts = PATCH_GRID_SHARED_PLACEHOLDER_FACTS
