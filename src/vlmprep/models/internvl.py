"""InternVL: an image is split into tiles (plus a thumbnail), each tile one item (`vlmprep.models.layouts.tiles`).

The processor writes an image as `<img>`, `image_seq_length` `<IMG_CONTEXT>` placeholders per tile back to back,
`</img>`; video frames come the same way, one tile each.
"""

import transformers

from ..generation import VisionFacts, VisionPrepGenerationMixin


class InternVLForConditionalGeneration(VisionPrepGenerationMixin, transformers.InternVLForConditionalGeneration):
    """Drop-in `transformers.InternVLForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep.models.internvl import InternVLForConditionalGeneration
    >>> config = transformers.InternVLConfig(
    ...     text_config={"model_type": "qwen2", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1},
    ...     vision_config={"model_type": "internvl_vision", "hidden_size": 32, "intermediate_size": 64,
    ...                    "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 16, "patch_size": 4},
    ...     image_token_id=122, image_seq_length=4,
    ... )
    >>> model = InternVLForConditionalGeneration(config).eval()
    >>> model.item_token_counts({})  # per tile
    4

    ```
    """

    # Tiles have the tower's fixed resolution; `pooler_output` is one `(tiles, image_seq_length, dim)` tensor.
    vision_facts = VisionFacts(tokens_per_image_attr="image_seq_length", per_image_keys=())
