"""Tiny config of Muse Glimmer, and the parts of it that Muse Spark (`audio_samples`) reuses: flattened patches on a
`(t, h, w)` grid as the patch-grid families' (`patch_grid`), 1D positions, a sliding decoder layer with rope and a
full NoPE one.
"""

from __future__ import annotations

import transformers

from .parts import (
    TINY_IMAGE_TOKEN_ID,
    TINY_TEXT_SPECIAL_IDS,
    TINY_VIDEO_TOKEN_ID,
    tiny_text_config,
    tiny_vision_config,
)
from .patch_grid import MERGE_SIZE, PATCH_SIZE, TEMPORAL_PATCH_SIZE


def tiny_muse_glimmer_config() -> transformers.MuseGlimmerConfig:
    """A tiny Muse Glimmer config: two vision layers, one windowed (a 16 px window: 4x4 patches of the position
    table), one full; two decoder layers, the first sliding-window with rope, the last full attention without rope
    (NoPE), as upstream's default `layer_types` and `layer_rope_theta` make them, with a window of 6 tokens so prompts
    exceed it.

    Returns:
        `transformers.MuseGlimmerConfig`
    """
    return transformers.MuseGlimmerConfig(
        text_config=tiny_text_config(None, **MUSE_GLIMMER_TEXT), **muse_glimmer_parts()
    )


# Muse Glimmer's (and Muse Spark's) decoder: a window of 6 tokens, which prompts exceed
MUSE_GLIMMER_TEXT = {"head_dim": 16, "sliding_window": 6, **TINY_TEXT_SPECIAL_IDS}


def muse_glimmer_parts() -> dict:
    """Muse Glimmer's (and Muse Spark's) vision tower, placeholders and projector: its config's arguments but the text.

    Returns:
        `dict`: `vision_config`, `image_token_id`, `video_token_id`, `out_hidden_size` and `projector_hidden_size`.
    """
    vision = tiny_vision_config(
        num_hidden_layers=2,
        image_size=None,
        patch_size=PATCH_SIZE,
        patch_temporal=TEMPORAL_PATCH_SIZE,
        merge_size=MERGE_SIZE,
        pos_emb_height=4,
        pos_emb_width=4,
        max_position_embeddings=16,
    )
    return {
        "vision_config": vision,
        "image_token_id": TINY_IMAGE_TOKEN_ID,
        "video_token_id": TINY_VIDEO_TOKEN_ID,
        "out_hidden_size": 32 * MERGE_SIZE**2,  # the tower's width after its pixel shuffle
        "projector_hidden_size": 32,
    }
