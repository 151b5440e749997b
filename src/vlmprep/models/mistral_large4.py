"""Mistral Large 4: Mistral3's Pixtral images (any size; an image's `[IMG]` placeholders one run per row of merged
patches, rows closed by `[IMG_BREAK]`, the last by `[IMG_END]`) on an MoE decoder of indexed-attention layers, some
reading an earlier layer's latent K/V (KV sharing).

Each indexed layer keeps its indexer's keys per token in the cache (`DynamicIndexedLayer`), which the prefix store holds
next to the K/V (`vlmprep.cache.layer_extras`); a layer reading another's K/V holds none of its own.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.pixtral import PixtralRowsLayout


class MistralLarge4ForConditionalGeneration(
    PixtralRowsLayout, VisionPrepMixin, transformers.MistralLarge4ForConditionalGeneration
):
    """Drop-in `transformers.MistralLarge4ForConditionalGeneration` whose vision tower runs once, in input preparation.

    `pixel_values` is `(num_images, C, max_height, max_width)` (padded) and `image_sizes` `(num_images, 2)`.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.mistral_large4 import MistralLarge4ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_mistral_large4_config
    >>> model = MistralLarge4ForConditionalGeneration(tiny_mistral_large4_config()).eval()
    >>> model.item_token_counts({"image_sizes": torch.tensor([[8, 12]])})  # 2 rows of 3 `[IMG]`
    [[3, 3]]

    ```
    """
