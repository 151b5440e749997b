"""Tiny configs of the cross-attention families: Llama 3.2 Vision (mllama).

A tower of 4 patches (plus its class token) per 16x16 tile, up to 2 tiles per image (aspect ratios 1x1, 1x2, 2x1), and
a 2-layer decoder whose second layer cross-attends to the images: layer 0 is self-attention, as in the published
checkpoints (upstream reads the cache length off layer 0).
"""

from __future__ import annotations

import transformers

from .parts import TINY_IMAGE_SIZE, TINY_IMAGE_TOKEN_ID, TINY_TEXT_SPECIAL_IDS, TINY_VOCAB_SIZE

TINY_MLLAMA_MAX_TILES = 2
TINY_MLLAMA_ASPECT_RATIOS = [[1, 1], [1, 2], [2, 1]]


def tiny_mllama_config() -> transformers.MllamaConfig:
    """A tiny `MllamaConfig`: tiles of 16 px in 8 px patches, two tower layers and one global layer, a 3-layer decoder
    (hidden 32) with a cross-attention layer between two self-attention layers (index 1).

    Returns:
        `transformers.MllamaConfig`

    Example:

    ```python
    >>> tiny_mllama_config().text_config.cross_attention_layers
    [1]

    ```
    """
    vision_config = {
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_global_layers": 1,
        "attention_heads": 2,
        "intermediate_size": 32,
        "vision_output_dim": 32,  # hidden 16, plus the one intermediate layer's 16
        "image_size": TINY_IMAGE_SIZE,
        "patch_size": 8,
        "max_num_tiles": TINY_MLLAMA_MAX_TILES,
        "intermediate_layers_indices": [0],
        "supported_aspect_ratios": TINY_MLLAMA_ASPECT_RATIOS,
    }
    text_config = {
        "vocab_size": TINY_VOCAB_SIZE,
        "hidden_size": 32,
        "intermediate_size": 64,
        # A self-attention layer after the cross-attention layer: its per-token keys and values depend on the images
        # (a last cross-attention layer would leave every cached key and value independent of them)
        "num_hidden_layers": 3,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "cross_attention_layers": [1],
        **TINY_TEXT_SPECIAL_IDS,
    }
    return transformers.MllamaConfig(
        vision_config=vision_config, text_config=text_config, image_token_index=TINY_IMAGE_TOKEN_ID
    )
