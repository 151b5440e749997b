"""Tiny configs of InstructBLIP-Video and DeepSeek-OCR-2.

InstructBLIP-Video: InstructBLIP's tiny tower, Q-Former and Llama decoder (`configs.qformer`), on videos of `TINY_VIDEO_FRAMES` frames, each frame's `TINY_QUERY_TOKENS` queries filling the video's run.
"""

from __future__ import annotations

import transformers

from .parts import TINY_IMAGE_SIZE, TINY_IMAGE_TOKEN_ID, TINY_VIDEO_TOKEN_ID, tiny_text_config
from .qformer import qformer_parts

# Frames per tiny video: two, so a video's run (8 placeholders) has a frame boundary inside it.
TINY_VIDEO_FRAMES = 2


def tiny_instructblipvideo_config() -> transformers.InstructBlipVideoConfig:
    """A tiny InstructBLIP-Video config: InstructBLIP's tiny parts, a video placeholder and no image placeholder.

    Returns:
        `transformers.InstructBlipVideoConfig`
    """
    return transformers.InstructBlipVideoConfig(
        **qformer_parts(),
        text_config=tiny_text_config(),
        video_token_index=TINY_VIDEO_TOKEN_ID,
    )


def tiny_deepseek_ocr2_config() -> transformers.DeepseekOcr2Config:
    """A tiny DeepSeek-OCR-2 config: a one-layer SAM tower (4-pixel patches, so a 16x16 view is a 1x1 grid after its
    two stride-2 convolutions), a one-layer query decoder and a two-layer decoder whose second layer is a
    mixture of experts. Every view still fills 144 placeholders: the tower's query count is not a config value.

    Returns:
        `transformers.DeepseekOcr2Config`
    """
    sam = {
        "hidden_size": 16,
        "output_channels": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": TINY_IMAGE_SIZE,
        "patch_size": 4,
        "window_size": 2,
        "global_attn_indexes": [0],
        "downsample_channels": [16, 32],
    }
    encoder = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    text = tiny_text_config(
        None,
        mlp_layer_types=["dense", "sparse"],
        n_routed_experts=4,
        n_shared_experts=1,
        moe_intermediate_size=16,
        num_experts_per_tok=2,
    )
    return transformers.DeepseekOcr2Config(
        vision_config={"sam_config": sam, "encoder_config": {**encoder, "num_key_value_heads": 2}},
        text_config=text,
        image_token_id=TINY_IMAGE_TOKEN_ID,
    )
