"""Tiny config of InstructBLIP-Video: InstructBLIP's tiny tower, Q-Former and Llama decoder (`configs.misc`), on
videos of `TINY_VIDEO_FRAMES` frames, each frame's `TINY_QUERY_TOKENS` queries filling the video's run.
"""

from __future__ import annotations

import transformers

from .misc import QFORMER_INIT_RANGE, TINY_QUERY_TOKENS, qformer_parts
from .parts import TINY_VIDEO_TOKEN_ID, tiny_text_config

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
        num_query_tokens=TINY_QUERY_TOKENS,
        video_token_index=TINY_VIDEO_TOKEN_ID,
        initializer_range=QFORMER_INIT_RANGE,
    )
