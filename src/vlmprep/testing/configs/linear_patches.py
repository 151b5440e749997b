"""Tiny configs of the families whose image patches are embedded by one linear layer: Fuyu."""

from __future__ import annotations

import transformers

from .parts import TINY_IMAGE_TOKEN_ID, tiny_text_config


def tiny_fuyu_config() -> transformers.FuyuConfig:
    """A tiny Fuyu config: 4 px patches of 3 channels (48 values each), a 2-layer Persimmon decoder.

    Returns:
        `transformers.FuyuConfig`
    """
    # Persimmon's partial rotary embedding over a head of 16: half of it rotated.
    text_config = tiny_text_config("persimmon", num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return transformers.FuyuConfig(
        text_config=text_config, patch_size=4, num_channels=3, image_token_id=TINY_IMAGE_TOKEN_ID
    )
