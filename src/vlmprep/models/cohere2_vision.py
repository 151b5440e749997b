"""Cohere2 Vision: Aya Vision's pixel-shuffled tiles (`vlmprep.models.layouts.tiles`), one item each.

The processor writes an image as `<|START_OF_IMG|>`, per tile its placeholders and `<|IMG_LINE_BREAK|>`, then
`<|END_OF_IMG|>`.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.tiles import PIXEL_SHUFFLED_TILES, PIXEL_SHUFFLED_TILES_FACTS


class Cohere2VisionForConditionalGeneration(VisionPrepMixin, transformers.Cohere2VisionForConditionalGeneration):
    """Drop-in `transformers.Cohere2VisionForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.cohere2_vision import Cohere2VisionForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_cohere2_vision_config
    >>> model = Cohere2VisionForConditionalGeneration(tiny_cohere2_vision_config()).eval()
    >>> model.item_token_counts({})  # per tile: (16 / 4 / downsample_factor 2) ** 2
    4

    ```
    """

    layout = PIXEL_SHUFFLED_TILES
    vision_facts = PIXEL_SHUFFLED_TILES_FACTS
