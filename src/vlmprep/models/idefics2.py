"""Idefics2: an image is one sub-image, or five (four crops and the whole image) with `do_image_splitting`.

`pixel_values` is `(batch_size, max_sub_images, C, H, W)` with all-zero padding sub-images, and
`pixel_attention_mask` marks the real pixels, as Idefics3's. The processor writes each sub-image as a run of
`image_seq_len` `<image>` placeholders between `<fake_token_around_image>` tokens, and the perceiver resampler turns a
sub-image into `perceiver_config.resampler_n_latents` features that depend on its own pixels and mask only: each real
sub-image is one item, with that fixed count.
"""

from dataclasses import replace

import transformers

from .base import VisionPrepMixin
from .layouts.sub_images import SubImagesLayout


class Idefics2ForConditionalGeneration(
    SubImagesLayout, VisionPrepMixin, transformers.Idefics2ForConditionalGeneration
):
    """Drop-in `transformers.Idefics2ForConditionalGeneration` whose vision tower and perceiver run once, in input
    preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.idefics2 import Idefics2ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_idefics2_config
    >>> model = Idefics2ForConditionalGeneration(tiny_idefics2_config()).eval()
    >>> pixel_values = torch.zeros(1, 5, 3, 16, 16)
    >>> pixel_values[0, :5] = 1.0  # one image split into five sub-images
    >>> model.count_items({"pixel_values": pixel_values})
    5

    ```
    """

    # The perceiver's latents, not the tower's patches, fill a sub-image's run.
    vision_facts = replace(
        SubImagesLayout.vision_facts,
        tokens_per_image=None,
        tokens_per_image_attr="perceiver_config.resampler_n_latents",
    )
