"""Tiny config of VideoLLaMA3 (`layouts.merge_sized_grid`): single-frame 4 px patches, a merge size per item, a Qwen2
decoder with 1D positions."""

from __future__ import annotations

import transformers

from .parts import TINY_IMAGE_TOKEN_ID, TINY_VIDEO_TOKEN_ID, tiny_text_config, tiny_vision_config


def tiny_video_llama_3_config() -> transformers.VideoLlama3Config:
    """A tiny VideoLLaMA3 config: a one-layer tower of 4 px patches (its 2D axial rope), a two-layer Qwen2 decoder.

    Returns:
        `transformers.VideoLlama3Config`
    """
    vision = tiny_vision_config(
        image_size=None, num_channels=3, rope_parameters={"rope_type": "axial", "rope_theta": 10000.0}
    )
    return transformers.VideoLlama3Config(
        text_config=tiny_text_config("qwen2", head_dim=16),
        vision_config=vision,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=TINY_VIDEO_TOKEN_ID,
    )
