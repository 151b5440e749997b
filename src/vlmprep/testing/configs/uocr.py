"""Tiny config of Unlimited-OCR: a SAM tower (2 px patches, two stride-2 convolutions) feeding a CLIP-like encoder,
on a decoder whose reference sliding-window layers keep the whole prompt and a window of decoded tokens.

A view of `s` px fills `q * (q + 1)` placeholders with `q = s / 8` (each row of its grid ended by a learned newline);
an image's run is its crops' grid (rows of crops side by side, each row ended by a newline), then its global view,
then one separator row.
"""

from __future__ import annotations

import transformers

from .parts import TINY_IMAGE_TOKEN_ID, tiny_text_config

# The global view's side and a crop's side, in pixels (2 queries a side each: short prompts keep the scenarios
# that try every cache length cheap).
UNLIMITED_OCR_GLOBAL_SIDE = 16
UNLIMITED_OCR_CROP_SIDE = 16


def tiny_unlimited_ocr_config() -> transformers.UnlimitedOcrConfig:
    """A tiny Unlimited-OCR config: a two-layer SAM tower of 2 px patches (one windowed, one global attention layer),
    a one-layer encoder, and a decoder of two reference sliding-window layers (a window of 4 decoded tokens, so
    answers exceed it), the second routing to 2 of 4 experts plus a shared one.

    Returns:
        `transformers.UnlimitedOcrConfig`
    """
    sam = {
        "hidden_size": 16,
        "output_channels": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": UNLIMITED_OCR_GLOBAL_SIDE,
        "patch_size": 2,
        "mlp_dim": 32,
        "window_size": 4,
        "global_attn_indexes": [1],
        "downsample_channels": [16, 32],
    }
    encoder = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": UNLIMITED_OCR_GLOBAL_SIDE,
        "patch_size": 8,
    }
    text = tiny_text_config(None, head_dim=16, max_position_embeddings=256, pad_token_id=0, bos_token_id=1)
    text.update(eos_token_id=2, sliding_window=4, mlp_layer_types=["dense", "sparse"])
    text.update(moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1)
    return transformers.UnlimitedOcrConfig(
        vision_config={"sam_config": sam, "encoder_config": encoder},
        text_config=text,
        image_token_id=TINY_IMAGE_TOKEN_ID,
    )
