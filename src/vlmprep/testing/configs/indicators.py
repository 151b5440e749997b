"""Tiny config of a family whose image indicator tokens get vision embeddings: Ovis2 (each crop of an image one run,
between indicator tokens that the model embeds from its visual embedding table)."""

from __future__ import annotations

import transformers

from .parts import TINY_IMAGE_TOKEN_ID, tiny_text_config, tiny_vision_config

# `<IMG_START>`, `<IMG_GRID>`, `<IMG_COL>`, `<IMG_ROW>`, `<IMG_END>`, in the order of `visual_indicator_token_ids`
OVIS2_INDICATOR_TOKEN_IDS = (115, 116, 117, 118, 119)


def tiny_ovis2_config() -> transformers.Ovis2Config:
    """A tiny Ovis2 config: 16 px crops of 4 px patches, strided by 2 into 4 visual tokens each (a 64-entry visual
    vocabulary, its last 5 entries the indicators'), Qwen2 decoder.

    Returns:
        `transformers.Ovis2Config`
    """
    vision = tiny_vision_config(hidden_stride=2, vocab_size=64, num_visual_indicator_tokens=5)
    return transformers.Ovis2Config(
        text_config=tiny_text_config("qwen2", head_dim=16),
        vision_config=vision,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        visual_indicator_token_ids=OVIS2_INDICATOR_TOKEN_IDS,
        vocab_size=128,
        hidden_size=32,
    )
