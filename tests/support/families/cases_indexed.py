"""Indexed-attention families: decoders whose attention layers keep an indexer's keys in the cache.

Qwen4-exp builds its prompts as Qwen3.5's processor does (`support.families.cases_qwen.build_qwen_inputs`: per-frame
video runs).
MiniMax M3 VL's processor returns no token types; its images' grids follow `image_grid` (seed 7 has seed 0's).
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.families.cases_llava_pixtral import build_mistral3_inputs
from support.families.cases_qwen import build_qwen_inputs
from support.families.cases_text_positions import image_grid
from support.patch_grid_inputs import grid_prompt, merged_tokens
from vlmprep.testing import IMAGE, TINY_IMAGE_TOKEN_ID, TINY_VIDEO_TOKEN_ID
from vlmprep.testing.configs.patch_grid import MERGE_SIZE, PATCH_SIZE, VISION_END, VISION_START

register(
    FamilyCase(
        "qwen4_exp",
        build_qwen_inputs,
        per_token_keys=("mm_token_type_ids",),
        pixel_keys=("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"),
    )
)


# Upstream's own limitation (the TODO of `MiniMaxM3VLIndexer`), not one of the drop-in's
MINIMAX_LEFT_PADDING = (
    "transformers 5.24's MiniMax M3 sparse indexer anchors its key blocks to cache slots and scores pad keys, so a "
    "left-padded row's logits differ from the row alone upstream too (its own TODO); the drop-in's padded batches "
    "equal upstream's `generate` on the same batch, and the calls that could not are refused "
    "(tests/scenarios/test_indexed_families.py)"
)


def minimax_placeholder(medium: str, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    """An image's run between the vision start and end tokens; a video's frames, each its timestamp text then its own
    run between the same tokens (`MiniMaxM3VLProcessor.replace_image_token`, `replace_video_token`)."""
    if medium is IMAGE:
        ids = [VISION_START, *[TINY_IMAGE_TOKEN_ID] * merged_tokens(grid), VISION_END]
        return ids, [0] * len(ids)
    t, h, w = grid
    ids = []
    for index in range(t):
        ids += [90 + index, VISION_START, *[TINY_VIDEO_TOKEN_ID] * (h * w // MERGE_SIZE**2), VISION_END]
    return ids, [0] * len(ids)


def build_minimax_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    ids, _, pixel_inputs, _ = grid_prompt(segments, image_seeds, image_grid, minimax_placeholder)
    return {"input_ids": torch.tensor([ids]), **pixel_inputs}


register(
    FamilyCase(
        "minimax_m3_vl",
        build_minimax_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"),
        skip={
            "chunked_batch_matches_unchunked_batch": MINIMAX_LEFT_PADDING,
            "left_padded_batch_matches_solo_runs": MINIMAX_LEFT_PADDING,
        },
        padded_rows_follow_pad_states=True,
    )
)

# Mistral Large 4's processor lays images out as Mistral3's (`PixtralProcessor`: rows of `[IMG]` and `[IMG_BREAK]`)
register(
    FamilyCase("mistral_large4", build_mistral3_inputs, per_token_keys=(), pixel_keys=("pixel_values", "image_sizes"))
)


def hy_v4_placeholder(medium: str, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    """`HYV4VLProcessor.replace_image_token` / `replace_video_token`: per frame, each merged row's placeholders and
    one more for its newline, between the chat template's vision start and end tokens; token types 1 (image) or 2."""
    t, h, w = grid
    count = t * (h // MERGE_SIZE) * (w // MERGE_SIZE + 1)
    token, kind = (TINY_IMAGE_TOKEN_ID, 1) if medium is IMAGE else (TINY_VIDEO_TOKEN_ID, 2)
    return [VISION_START, *[token] * count, VISION_END], [0, *[kind] * count, 0]


def build_hy_v4_vl_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    # Single-frame patches: one RGB patch of `PATCH_SIZE` px per row, frames of a video one after another
    ids, types, pixel_inputs, _ = grid_prompt(
        segments, image_seeds, image_grid, hy_v4_placeholder, (3 * PATCH_SIZE**2,)
    )
    return {"input_ids": torch.tensor([ids]), "mm_token_type_ids": torch.tensor([types]), **pixel_inputs}


register(
    FamilyCase(
        "hy_v4_vl",
        build_hy_v4_vl_inputs,
        per_token_keys=("mm_token_type_ids",),
        pixel_keys=("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"),
    )
)
