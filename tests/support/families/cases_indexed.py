"""Indexed-attention families: decoders whose attention layers keep an indexer's keys in the cache.

Qwen4-exp builds its prompts as Qwen3.5's processor does (`support.families.cases_qwen.build_qwen_inputs`: per-frame
video runs); its Gated DeltaNet layers' recurrent state cannot be rolled back by `DynamicCache.crop`, as Qwen3.5's.
"""

from __future__ import annotations

from support.cases import FamilyCase, register
from support.families.cases_qwen import HYBRID_SKIPS, build_qwen_inputs

register(
    FamilyCase(
        "qwen4_exp",
        build_qwen_inputs,
        per_token_keys=("mm_token_type_ids",),
        pixel_keys=("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"),
        skip=HYBRID_SKIPS,
    )
)
