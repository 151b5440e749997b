"""Inkling2-Loop: Inkling2's images and decoder layers, some of them run several times per forward (looped), each
pass with its own cache layer.

`pixel_values` has one row per placeholder, `(merge * patch, merge * patch, channels)` pixels, with one
`image_grid_thw` row per image counted in placeholders: an image is one run of `t * h * w` placeholders
(`Inkling2Processor.replace_image_token`). Its features depend only on its own rows (a class token and attention
within the image). The decoder's positions are plain 1D; its convolution and linear-attention states carry from one
prefill chunk to the next in transformers' own cache layers.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import TokenGridTextPositionsLayout


class Inkling2LoopForConditionalGeneration(
    TokenGridTextPositionsLayout, VisionPrepMixin, transformers.Inkling2LoopForConditionalGeneration
):
    """Drop-in `transformers.Inkling2LoopForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.inkling2_loop import Inkling2LoopForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_inkling2_loop_config
    >>> model = Inkling2LoopForConditionalGeneration(tiny_inkling2_loop_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 2, 2], [1, 2, 3]])})  # one per grid cell
    [4, 6]

    ```
    """
