"""Cohere2 Vision: Aya Vision's pixel-shuffled tiles (`vlmprep.models.layouts.tiles`), one item each.

The processor writes an image as `<|START_OF_IMG|>`, per tile its placeholders and `<|IMG_LINE_BREAK|>`, then
`<|END_OF_IMG|>`.
"""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.tiles import PixelShuffledTilesLayout


class Cohere2VisionForConditionalGeneration(
    PixelShuffledTilesLayout, VisionPrepGenerationMixin, transformers.Cohere2VisionForConditionalGeneration
):
    """Drop-in `transformers.Cohere2VisionForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep.models.cohere2_vision import Cohere2VisionForConditionalGeneration
    >>> config = transformers.Cohere2VisionConfig(
    ...     text_config={"model_type": "cohere2", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1},
    ...     vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
    ...                    "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 16, "patch_size": 4},
    ...     image_token_id=122, alignment_intermediate_size=64,
    ... )
    >>> model = Cohere2VisionForConditionalGeneration(config).eval()
    >>> model.item_token_counts({})  # per tile: (16 / 4 / downsample_factor 2) ** 2
    4

    ```
    """
