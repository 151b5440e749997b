"""Mistral3 (Pixtral vision): any image size; an image's `[IMG]` placeholders come one run per row of merged patches.

The processor lays an image out as rows of `[IMG] * width` each closed by `[IMG_BREAK]` (the last by `[IMG_END]`);
the features fill the `[IMG]` tokens only, row by row. Each row is one piece of the image's span: a cache may end
anywhere (the model is causal) and the rows after it are fed.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.pixtral import PixtralRowsLayout


class Mistral3ForConditionalGeneration(
    PixtralRowsLayout, VisionPrepMixin, transformers.Mistral3ForConditionalGeneration
):
    """Drop-in `transformers.Mistral3ForConditionalGeneration` whose vision tower runs once, in input preparation.

    `pixel_values` is `(num_images, C, max_height, max_width)` (padded) and `image_sizes` `(num_images, 2)`.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.mistral3 import Mistral3ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_mistral3_config
    >>> model = Mistral3ForConditionalGeneration(tiny_mistral3_config()).eval()
    >>> model.item_token_counts({"image_sizes": torch.tensor([[8, 12]])})  # 2 rows of 3 `[IMG]`
    [[3, 3]]

    ```
    """
