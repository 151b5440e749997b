"""Aya Vision: an image is split into tiles (plus a global thumbnail), each tile encoded on its own.

The processor writes an image as `<|START_OF_IMG|>`, then per tile a tile marker and the tile's run of
`<|IMG_PATCH|>` placeholders, then `<|END_OF_IMG|>`; `pixel_values` is `(total_tiles, C, H, W)` over all images,
without the tiles-per-image count (`num_patches` is not a model input). A tile's features depend only on its own
pixels, so each tile is one item of the mechanism: one row of `pixel_values`, one placeholder run, one entry of the
encoder cache. The mixin's "image" counts and messages therefore count tiles.
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
