"""DeepSeek-OCR-2: a SAM tower whose patch grid, halved twice by stride-2 convolutions, is read by a small decoder
together with learned queries (144 of them for grids up to 12x12, else 256); the queries' outputs, projected, are a
view's features. An image is its `num_local_patches` crops (`pixel_values_local`), its global view (`pixel_values`) and
a learned view separator, all in one run of placeholders (`layouts/multi_run.py`, `global_and_local_views`).
"""

import math

import transformers

from .base import VisionPrepMixin
from .layouts.multi_run import GlobalAndLocalViewsLayout

# The vision model's learned query counts: 144 (a 12x12 grid, 768-pixel views) for grids of at most 144 cells, else
# 256 (16x16, 1024-pixel views), whatever the config (`DeepseekOcr2VisionModel`).
SMALL_VIEW_QUERIES, LARGE_VIEW_QUERIES = 144, 256


class DeepseekOcr2ForConditionalGeneration(
    GlobalAndLocalViewsLayout, VisionPrepMixin, transformers.DeepseekOcr2ForConditionalGeneration
):
    """Drop-in `transformers.DeepseekOcr2ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.deepseek_ocr2 import DeepseekOcr2ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_deepseek_ocr2_config
    >>> model = DeepseekOcr2ForConditionalGeneration(tiny_deepseek_ocr2_config()).eval()
    >>> model.item_token_counts({"pixel_values": torch.zeros(1, 3, 16, 16)})  # the global view's queries, a separator
    [145]

    ```
    """

    views_in_one_run = True
    separator_tokens = 1  # the learned `view_separator` closes each image's run

    def view_token_count(self, height: int, width: int) -> int:
        """Placeholders of a `height x width` view: the learned queries the tower picks by its grid's cells."""
        patch = self.config.vision_config.sam_config.patch_size
        cells = math.ceil(height // patch / 4) * math.ceil(width // patch / 4)
        return SMALL_VIEW_QUERIES if cells <= SMALL_VIEW_QUERIES else LARGE_VIEW_QUERIES

    def _tower_channels(self) -> int:
        return self.config.vision_config.sam_config.num_channels
