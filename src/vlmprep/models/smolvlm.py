"""SmolVLM: Idefics3's layout (sub-images, each its own placeholder run); video frames come as sub-images too."""

import transformers

from .base import VisionPrepMixin
from .layouts.sub_images import SubImagesLayout


class SmolVLMForConditionalGeneration(SubImagesLayout, VisionPrepMixin, transformers.SmolVLMForConditionalGeneration):
    """Drop-in `transformers.SmolVLMForConditionalGeneration` whose vision tower runs once, in input preparation.

    Each real sub-image of `pixel_values` `(batch_size, max_sub_images, C, H, W)` is one item (see
    `vlmprep.models.layouts.sub_images`).

    Example:

    ```python
    >>> from vlmprep.models.smolvlm import SmolVLMForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_smolvlm_config
    >>> model = SmolVLMForConditionalGeneration(tiny_smolvlm_config()).eval()
    >>> model.item_token_counts({})  # per sub-image: (16 / 4) ** 2 patches, pixel-shuffled by 2
    4

    ```
    """
