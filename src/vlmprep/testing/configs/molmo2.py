"""Tiny config of Molmo2: crops of 4x4 patches (4 px), pooled 2x2 per placeholder by the adapter.

Its special tokens are those of the tiny vocabulary (`parts`): `<im_start>` 120, `<im_end>` 121, `<im_patch>` 122
(the placeholder), `<low_res_im_start>` 118 and `<im_col>` 119; the decoder's extra vocabulary rows hold them as
upstream's does.
"""

from __future__ import annotations

import transformers
from transformers.models.molmo2.configuration_molmo2 import (
    Molmo2AdapterConfig,
    Molmo2TextConfig,
    Molmo2VisionConfig,
)

from .parts import TINY_BOI_TOKEN_ID, TINY_EOI_TOKEN_ID, TINY_IMAGE_TOKEN_ID, TINY_TEXT_SPECIAL_IDS, TINY_VOCAB_SIZE

# `<low_res_im_start>` and `<im_col>` (the processor writes one after every row of tokens)
MOLMO2_LOW_RES_START_ID, MOLMO2_COLUMN_ID = 118, 119
# A crop is 16 px, 4x4 patches of 4 px
MOLMO2_CROP_SIDE, MOLMO2_PATCH_SIZE = 16, 4


def tiny_molmo2_config() -> transformers.Molmo2Config:
    """A tiny Molmo2 config: a two-layer ViT over 16 px crops (4x4 patches), an adapter pooling from its last layer,
    and a two-layer decoder of hidden size 32.

    Returns:
        `transformers.Molmo2Config`
    """
    text = Molmo2TextConfig(
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_hidden_layers=2,
        vocab_size=TINY_VOCAB_SIZE,
        max_position_embeddings=512,
        **TINY_TEXT_SPECIAL_IDS,
    )
    vision = Molmo2VisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=8,
        image_size=[MOLMO2_CROP_SIDE, MOLMO2_CROP_SIDE],
        patch_size=MOLMO2_PATCH_SIZE,
    )
    adapter = Molmo2AdapterConfig(
        vision_feature_layer=[-1],
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=8,
        intermediate_size=64,
        text_hidden_size=32,
    )
    return transformers.Molmo2Config(
        text_config=text,
        vision_config=vision,
        adapter_config=adapter,
        image_start_token_id=TINY_BOI_TOKEN_ID,
        low_res_image_start_token_id=MOLMO2_LOW_RES_START_ID,
        image_end_token_id=TINY_EOI_TOKEN_ID,
        image_patch_id=TINY_IMAGE_TOKEN_ID,
    )
