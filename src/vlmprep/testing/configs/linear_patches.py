"""Tiny configs of the families whose image patches are embedded by one linear layer: Fuyu."""

from __future__ import annotations

import transformers

from .parts import TINY_IMAGE_TOKEN_ID, TINY_TEXT_SPECIAL_IDS, tiny_text_config


def tiny_fuyu_config() -> transformers.FuyuConfig:
    """A tiny Fuyu config: 4 px patches of 3 channels (48 values each), a 2-layer Persimmon decoder.

    Returns:
        `transformers.FuyuConfig`
    """
    # Persimmon's partial rotary embedding over a head of 16: half of it rotated.
    text_config = tiny_text_config("persimmon", num_key_value_heads=2, **TINY_TEXT_SPECIAL_IDS)
    return transformers.FuyuConfig(
        text_config=text_config, patch_size=4, num_channels=3, image_token_id=TINY_IMAGE_TOKEN_ID
    )
