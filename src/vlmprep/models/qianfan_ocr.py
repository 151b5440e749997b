"""Qianfan-OCR: InternVL's tiles (`vlmprep.models.layouts.tiles`) before a Qwen3 decoder.

The processor writes an image as `<img>`, `image_seq_length` `<IMG_CONTEXT>` placeholders per tile back to back,
`</img>`, as InternVL's does.
"""

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.stated_counts import TILES


class QianfanOCRForConditionalGeneration(VisionPrepMixin, transformers.QianfanOCRForConditionalGeneration):
    """Drop-in `transformers.QianfanOCRForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.qianfan_ocr import QianfanOCRForConditionalGeneration
    >>> QianfanOCRForConditionalGeneration.vision_facts.tokens_per_image_attr  # placeholders per tile, as InternVL
    'image_seq_length'

    ```
    """

    layout = TILES

    # Tiles have the tower's fixed resolution; `pooler_output` is one `(tiles, image_seq_length, dim)` tensor.
    vision_facts = VisionFacts(tokens_per_image_attr="image_seq_length", per_image_keys=())
