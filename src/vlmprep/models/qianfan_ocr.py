"""Qianfan-OCR: InternVL's layout. An image is split into tiles (plus a thumbnail), each tile encoded on its own.

The processor writes an image as `<img>`, `image_seq_length` `<IMG_CONTEXT>` placeholders per tile back to back,
`</img>`; `pixel_values` is `(total_tiles, C, H, W)` over all images, without the tiles-per-image count. A tile's
features depend only on its own pixels, so each tile is one item of the mechanism: one row of `pixel_values`, one
`image_seq_length` slice of the image's run, one encoder-cache entry. The mixin's "image" counts therefore count
tiles.
"""

import transformers

from ..generation import VisionFacts, VisionPrepGenerationMixin


class QianfanOCRForConditionalGeneration(VisionPrepGenerationMixin, transformers.QianfanOCRForConditionalGeneration):
    """Drop-in `transformers.QianfanOCRForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep.models.qianfan_ocr import QianfanOCRForConditionalGeneration
    >>> config = transformers.QianfanOCRConfig(
    ...     text_config={"model_type": "qwen3", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1},
    ...     vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
    ...                    "num_attention_heads": 2, "image_size": 16, "patch_size": 4},
    ...     image_token_id=122, image_seq_length=4,
    ... )
    >>> model = QianfanOCRForConditionalGeneration(config).eval()
    >>> model.item_token_counts({})  # per tile
    4

    ```
    """

    # Tiles have the tower's fixed resolution; `pooler_output` is one `(tiles, image_seq_length, dim)` tensor.
    vision_facts = VisionFacts(tokens_per_image_attr="image_seq_length", per_image_keys=())
