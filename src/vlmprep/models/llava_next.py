"""LLaVA-NeXT: "anyres" images, whose placeholder count depends on each image's size and the grid pinpoints."""

import transformers

from .base import VisionPrepMixin
from .layouts.anyres import AnyresCropsLayout


class LlavaNextForConditionalGeneration(
    AnyresCropsLayout, VisionPrepMixin, transformers.LlavaNextForConditionalGeneration
):
    """Drop-in `transformers.LlavaNextForConditionalGeneration` whose vision tower runs once, in input preparation.

    `pixel_values` is `(num_images, num_crops, channels, height, width)` and `image_sizes` `(num_images, 2)`; an
    image's placeholder count follows from its size, the grid pinpoints and the unpadding.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.llava_next import LlavaNextForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_llava_next_config
    >>> model = LlavaNextForConditionalGeneration(tiny_llava_next_config()).eval()
    >>> model.item_token_counts({"image_sizes": torch.tensor([[8, 13], [13, 8]])})
    [14, 16]

    ```
    """
