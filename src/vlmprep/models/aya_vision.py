"""Aya Vision: an image is split into tiles (plus a global thumbnail), each tile one item (`layouts.tiles`).

The processor writes an image as `<|START_OF_IMG|>`, then per tile a tile marker and the tile's run of
`<|IMG_PATCH|>` placeholders, then `<|END_OF_IMG|>` (`num_patches`, the tiles per image, is not a model input).
"""

import transformers

from .base import VisionPrepMixin
from .layouts.tiles import PIXEL_SHUFFLED_TILES, PIXEL_SHUFFLED_TILES_FACTS


class AyaVisionForConditionalGeneration(VisionPrepMixin, transformers.AyaVisionForConditionalGeneration):
    """Drop-in `transformers.AyaVisionForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.aya_vision import AyaVisionForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_aya_vision_config
    >>> model = AyaVisionForConditionalGeneration(tiny_aya_vision_config()).eval()
    >>> model.item_token_counts({})  # per tile: (16 / 4 / downsample_factor 2) ** 2
    4

    ```
    """

    layout = PIXEL_SHUFFLED_TILES
    vision_facts = PIXEL_SHUFFLED_TILES_FACTS
