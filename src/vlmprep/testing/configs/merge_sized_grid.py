"""Tiny configs of VideoLLaMA3 (`layouts.merge_sized_grid`: single-frame 4 px patches, a merge size per item, a Qwen2
decoder with 1D positions) and of HunYuanVL (`layouts.patch_grid_framed`: an image's run holds its row separators and
its begin and end embeddings)."""

from __future__ import annotations

import transformers

from .parts import (
    TINY_IMAGE_TOKEN_ID,
    TINY_TEXT_SPECIAL_IDS,
    TINY_VIDEO_TOKEN_ID,
    tiny_text_config,
    tiny_vision_config,
)


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


def tiny_hunyuan_vl_config() -> transformers.HunYuanVLConfig:
    """A tiny HunYuanVL config: a one-layer tower of 4 px patches merged 2x2 (its newline, begin and end embeddings
    included), a two-layer decoder with 4 multimodal rope axes (one plain, then width, height and image index).

    Returns:
        `transformers.HunYuanVLConfig`
    """
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 2, 2, 2]}
    text = tiny_text_config(None, head_dim=16, max_position_embeddings=1024, rope_parameters=rope)
    text.update(**TINY_TEXT_SPECIAL_IDS, eod_token_id=3, sep_token_id=4)
    vision = tiny_vision_config(
        image_size=None,
        num_key_value_heads=1,
        num_channels=3,
        spatial_merge_size=2,
        max_image_size=32,
        out_hidden_size=32,
    )
    return transformers.HunYuanVLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        im_start_id=110,
        im_end_id=111,
        im_newline_id=112,
    )
