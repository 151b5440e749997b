"""Tiny configs of the Q-Former families: BLIP-2 and InstructBLIP.

A ViT tower of 16 patches per 16x16 image, a two-layer Q-Former of `TINY_QUERY_TOKENS` learned queries cross-attending
to it in every layer, and a decoder-only language model (OPT, as the published BLIP-2 OPT checkpoints; Llama for
InstructBLIP's Vicuna). Fewer queries than patches, so the Q-Former's pooling matters. No dropout, as every tiny config (a
part in train mode stays comparable with transformers).
"""

from __future__ import annotations

from typing import Any

import transformers

from .parts import TINY_IMAGE_TOKEN_ID, tiny_text_config, tiny_vision_config

# Placeholders per image: the Q-Former's learned queries.
TINY_QUERY_TOKENS = 4
# Under upstream's 0.02, the tower's output reaches the queries through two small cross-attention products: another
# image moves the logits by 5e-4 only. A wider draw makes every image count (1e-2).
QFORMER_INIT_RANGE = 0.1


def _qformer(**overrides: Any) -> dict[str, Any]:
    """A two-layer Q-Former (hidden size 32) cross-attending to the 32-wide tower in every layer."""
    config = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "encoder_hidden_size": 32,
        "cross_attention_frequency": 1,
        "vocab_size": 128,
        "max_position_embeddings": 64,
        "initializer_range": QFORMER_INIT_RANGE,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    }
    return {**config, **overrides}


def _opt() -> dict[str, Any]:
    """A tiny OPT decoder with OPT's special ids (pad 1, BOS = EOS 2)."""
    config = tiny_text_config("opt", ffn_dim=64, word_embed_proj_dim=32, max_position_embeddings=128)
    del config["num_key_value_heads"]  # OPT's attention has no grouped key-value heads
    return {**config, "dropout": 0.0, "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2}


def qformer_parts() -> dict[str, Any]:
    """The keyword arguments every Q-Former config shares: a tower drawn as wide as the Q-Former, its queries, the
    wider initialisation.

    Returns:
        `dict[str, Any]`: `vision_config`, `qformer_config`, `num_query_tokens` and `initializer_range`.
    """
    return {
        "vision_config": tiny_vision_config(initializer_range=QFORMER_INIT_RANGE),
        "qformer_config": _qformer(),
        "num_query_tokens": TINY_QUERY_TOKENS,
        "initializer_range": QFORMER_INIT_RANGE,
    }


def tiny_blip_2_config() -> transformers.Blip2Config:
    """A tiny BLIP-2 config: ViT tower, two-layer Q-Former of 4 queries, OPT decoder.

    Returns:
        `transformers.Blip2Config`
    """
    return transformers.Blip2Config(
        **qformer_parts(),
        text_config=_opt(),
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )


def tiny_instructblip_config() -> transformers.InstructBlipConfig:
    """A tiny InstructBLIP config: BLIP-2's tower and Q-Former (which also reads the instruction), a Llama decoder
    (Vicuna's).

    Returns:
        `transformers.InstructBlipConfig`
    """
    return transformers.InstructBlipConfig(
        **qformer_parts(),
        text_config=tiny_text_config(),
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )
