"""Tiny configs of the families whose image indicator tokens get vision embeddings: Ovis2 (each crop of an image one
run, between indicator tokens that the model embeds from its visual embedding table) and Ovis2.5 (a patch grid per
image or video, one run between start and end tokens that the model embeds from the same kind of table)."""

from __future__ import annotations

import transformers

from .parts import TINY_IMAGE_TOKEN_ID, TINY_VIDEO_TOKEN_ID, tiny_text_config, tiny_vision_config
from .patch_grid import MERGE_SIZE, PATCH_SIZE, VISION_END, VISION_START

# `<IMG_START>`, `<IMG_GRID>`, `<IMG_COL>`, `<IMG_ROW>`, `<IMG_END>`, in the order of `visual_indicator_token_ids`
OVIS2_INDICATOR_TOKEN_IDS = (115, 116, 117, 118, 119)
# Ovis2.5's video start and end tokens (its images take the vision start and end tokens of the patch-grid families).
OVIS2_5_VIDEO_START, OVIS2_5_VIDEO_END = 112, 113


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


def tiny_ovis2_5_config() -> transformers.Ovis2_5Config:
    """A tiny Ovis2.5 config (transformers 5.25+): a two-layer tower (one windowed layer of a 16 px window, one full)
    of 4 px patches, one frame per patch, 2x2 patches merged by a visual tokenizer over a 64-entry visual vocabulary
    (its last 4 entries the start/end indicators), a Qwen3 decoder.

    Returns:
        `transformers.Ovis2_5Config`
    """
    vision = tiny_vision_config(
        num_hidden_layers=2,
        image_size=32,
        patch_size=PATCH_SIZE,
        intermediate_size=64,
        spatial_merge_size=MERGE_SIZE,
        # The patch embedding is a 2D convolution over `num_channels`: upstream reads one frame per patch only
        temporal_patch_size=1,
        window_size=16,
        layer_types=["window_attention", "full_attention"],
        vocab_size=64,
        num_visual_indicator_tokens=4,
    )
    return transformers.Ovis2_5Config(
        text_config=tiny_text_config("qwen3", head_dim=16),
        vision_config=vision,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=TINY_VIDEO_TOKEN_ID,
        image_start_token_id=VISION_START,
        image_end_token_id=VISION_END,
        video_start_token_id=OVIS2_5_VIDEO_START,
        video_end_token_id=OVIS2_5_VIDEO_END,
    )
