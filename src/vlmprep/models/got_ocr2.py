"""GOT-OCR2: an image (or each page crop of it) is one fixed-resolution tile, one item (`layouts.tiles`).

The processor writes an image as `<img>`, `num_image_tokens` `<imgpad>` placeholders per tile back to back, `</img>`.
"""

import math

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.stated_counts import TILES


def convolved_tile_tokens(config: transformers.GotOcr2Config) -> int:
    """Placeholders per tile: the patch grid after the projector's two stride-2 convolutions (`ceil(n / 2)` each).

    Computed from the vision config rather than read from `config.image_seq_length`, which the model never reads (its
    default, 576, is not what the default 1024px / patch-16 tower yields: 256).
    """
    grid = config.vision_config.image_size // config.vision_config.patch_size
    side = math.ceil(math.ceil(grid / 2) / 2)
    return side * side


class GotOcr2ForConditionalGeneration(VisionPrepMixin, transformers.GotOcr2ForConditionalGeneration):
    """Drop-in `transformers.GotOcr2ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.got_ocr2 import GotOcr2ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_got_ocr2_config
    >>> model = GotOcr2ForConditionalGeneration(tiny_got_ocr2_config()).eval()
    >>> model.item_token_counts({})  # per tile: the 8x8 patch grid, halved twice by the projector's convolutions
    4

    ```
    """

    layout = TILES

    # Tiles have the tower's fixed resolution; `pooler_output` is one `(tiles, tokens, dim)` tensor.
    vision_facts = VisionFacts(per_image_keys=(), tokens_per_image=convolved_tile_tokens)
