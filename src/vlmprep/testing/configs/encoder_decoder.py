"""Tiny configs of the encoder-decoder families, whose image placeholders are in the encoder's prompt: Florence-2 (a
DaViT tower, a BART encoder-decoder) and T5Gemma 2 (a SigLIP tower, Gemma-like encoder and decoder)."""

from __future__ import annotations

import transformers

from .parts import (
    TINY_BOI_TOKEN_ID,
    TINY_EOI_TOKEN_ID,
    TINY_IMAGE_TOKEN_ID,
    TINY_TEXT_SPECIAL_IDS,
    TINY_VOCAB_SIZE,
    tiny_text_config,
    tiny_vision_config,
)


def tiny_florence2_config() -> transformers.Florence2Config:
    """A tiny Florence-2 config: a two-stage DaViT tower (strides 4 and 2: a 16x16 image is a 2x2 grid, 5 features
    with the pooled one), a two-layer BART encoder and decoder of hidden size 32.

    Returns:
        `transformers.Florence2Config`
    """
    vision = {
        "depths": [1, 1],
        "patch_size": [7, 3],
        "patch_stride": [4, 2],
        "patch_padding": [3, 1],
        "patch_prenorm": [False, True],
        "embed_dim": [16, 32],
        "num_heads": [2, 2],
        "num_groups": [2, 2],
        "window_size": 2,
        "drop_path_rate": 0.0,
        "projection_dim": 32,
        "max_position_embeddings": 8,
        "max_temporal_embeddings": 4,
    }
    text = {
        "model_type": "bart",
        "vocab_size": TINY_VOCAB_SIZE,
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "max_position_embeddings": 128,
        "decoder_start_token_id": TINY_TEXT_SPECIAL_IDS["eos_token_id"],
        # At BART's 0.02 the decoder's cross-attention passes the image on weakly: other pixels move the logits by
        # ~4e-4; at 0.05, by ~7e-3, as images move the other families' tiny logits
        "init_std": 0.05,
        "forced_eos_token_id": None,
        # No dropout (BART's default is 0.1), as in every tiny config: a test with a part in train mode compares logits
        "dropout": 0.0,
        **TINY_TEXT_SPECIAL_IDS,
    }
    return transformers.Florence2Config(text_config=text, vision_config=vision, image_token_id=TINY_IMAGE_TOKEN_ID)


def tiny_t5gemma2_config(mm_tokens_per_image: int = 4) -> transformers.T5Gemma2Config:
    """A tiny T5Gemma 2 config: a SigLIP tower (a 16x16 image, 16 patches pooled to `mm_tokens_per_image`), a
    two-layer encoder and decoder (one sliding, one full attention layer each) of hidden size 32.

    Args:
        mm_tokens_per_image (`int`, *optional*, defaults to 4): placeholder tokens per image, a square dividing the
            4x4 patch grid.

    Returns:
        `transformers.T5Gemma2Config`
    """
    text = tiny_text_config(
        None,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=6,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=1024,
        **TINY_TEXT_SPECIAL_IDS,
    )
    encoder = {
        "text_config": text,
        "vision_config": tiny_vision_config("siglip_vision_model", num_channels=3),
        "mm_tokens_per_image": mm_tokens_per_image,
        "boi_token_index": TINY_BOI_TOKEN_ID,
        "eoi_token_index": TINY_EOI_TOKEN_ID,
        "image_token_index": TINY_IMAGE_TOKEN_ID,
    }
    return transformers.T5Gemma2Config(encoder=encoder, decoder=dict(text), image_token_index=TINY_IMAGE_TOKEN_ID)
