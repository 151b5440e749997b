"""InternVL: an image is split into tiles (plus a thumbnail), each tile one item (`vlmprep.models.layouts.tiles`).

The processor writes an image as `<img>`, `image_seq_length` `<IMG_CONTEXT>` placeholders per tile back to back,
`</img>`; video frames come the same way, one tile each.
"""

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.stated_counts import TILES


class InternVLForConditionalGeneration(VisionPrepMixin, transformers.InternVLForConditionalGeneration):
    """Drop-in `transformers.InternVLForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.internvl import InternVLForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_internvl_config
    >>> model = InternVLForConditionalGeneration(tiny_internvl_config()).eval()
    >>> model.item_token_counts({})  # per tile
    4

    ```
    """

    layout = TILES

    # Tiles have the tower's fixed resolution; `pooler_output` is one `(tiles, image_seq_length, dim)` tensor.
    vision_facts = VisionFacts(tokens_per_image_attr="image_seq_length", per_image_keys=())
