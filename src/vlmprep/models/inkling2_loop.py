"""Inkling2-Loop: Inkling2's images and decoder layers, some of them run several times per forward (looped), each
pass with its own cache layer.

Images, positions and recurrent states are as in `inkling2.py` (layout `token_grid_text_positions`): one run of
`t * h * w` placeholders per image, one pixel row each.
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
