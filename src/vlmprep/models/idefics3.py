"""Idefics3: an image is split into sub-images (a grid of crops plus the global image), each encoded on its own.

`pixel_values` is `(batch_size, max_sub_images, C, H, W)`: each sample's sub-images, padded with all-zero sub-images
that the model drops; `pixel_attention_mask` `(batch_size, max_sub_images, H, W)` marks the real pixels. The
processor writes each sub-image as its own run of `image_seq_len` `<image>` placeholders (behind
`<fake_token_around_image><row_i_col_j>` or `<global-img>`), and a sub-image's features depend only on its own pixels
and mask. So each real sub-image is one item of the mechanism, numbered in `(sample, sub-image)` order, which is the
order the model fills placeholders in; the mixin's "image" counts and messages count sub-images.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.sub_images import SubImagesLayout


class Idefics3ForConditionalGeneration(
    SubImagesLayout, VisionPrepMixin, transformers.Idefics3ForConditionalGeneration
):
    """Drop-in `transformers.Idefics3ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.idefics3 import Idefics3ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_idefics3_config
    >>> model = Idefics3ForConditionalGeneration(tiny_idefics3_config()).eval()
    >>> pixel_values = torch.zeros(2, 3, 3, 16, 16)  # 2 samples, up to 3 sub-images each
    >>> pixel_values[0, :3] = 1.0; pixel_values[1, :1] = 1.0  # the rest is padding
    >>> model.count_items({"pixel_values": pixel_values}), model.item_token_counts({})
    (4, 4)

    ```
    """
