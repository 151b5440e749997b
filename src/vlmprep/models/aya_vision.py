"""Aya Vision: an image is split into tiles (plus a global thumbnail), each tile one item (`layouts.tiles`).

The processor writes an image as `<|START_OF_IMG|>`, then per tile a tile marker and the tile's run of
`<|IMG_PATCH|>` placeholders, then `<|END_OF_IMG|>` (`num_patches`, the tiles per image, is not a model input).
"""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.tiles import PixelShuffledTilesLayout


class AyaVisionForConditionalGeneration(
    PixelShuffledTilesLayout, VisionPrepGenerationMixin, transformers.AyaVisionForConditionalGeneration
):
    """Drop-in `transformers.AyaVisionForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep.models.aya_vision import AyaVisionForConditionalGeneration
    >>> config = transformers.AyaVisionConfig(
    ...     text_config={"model_type": "cohere2", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1},
    ...     vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
    ...                    "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 16, "patch_size": 4},
    ...     image_token_index=122,
    ... )
    >>> model = AyaVisionForConditionalGeneration(config).eval()
    >>> model.item_token_counts({})  # per tile: (16 / 4 / downsample_factor 2) ** 2
    4

    ```
    """
