"""Cosmos3 Omni, Inkling (`inkling_mm_model`) and Nemotron-H Omni: prompts as their processors build them.

Cosmos3 Omni's processor writes Qwen3-VL's prompts: an image is one run of its merged grid between vision start and
end (`mm_token_type_ids` 1); a video one run per frame, each after its timestamp text (type 2).
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.patch_grid_inputs import IMAGE_GRIDS, grid_prompt, merged_tokens
from vlmprep.testing import IMAGE, TINY_IMAGE_TOKEN_ID, TINY_VIDEO_TOKEN_ID
from vlmprep.testing.configs.patch_grid import MERGE_SIZE, VISION_END, VISION_START


def _qwen3_vl_item(medium: str, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    # `Cosmos3OmniProcessor` as Qwen3-VL's: an image one run; a video `<{time} seconds>` then each frame's run
    if medium == IMAGE:
        run = [TINY_IMAGE_TOKEN_ID] * merged_tokens(grid)
        return [VISION_START, *run, VISION_END], [0, *[1] * len(run), 0]
    t, h, w = grid
    frame_tokens = h * w // MERGE_SIZE**2
    ids, types = [], []
    for index in range(t):
        ids += [90 + index, VISION_START, *[TINY_VIDEO_TOKEN_ID] * frame_tokens, VISION_END]
        types += [0, 0, *[2] * frame_tokens, 0]
    return ids, types


def build_cosmos3_omni_inputs(config, segments: list, item_seeds: list[int]) -> dict:
    """`input_ids`, `mm_token_type_ids` and the pixel inputs with their grids; the image drawn with seed `s` has grid
    `IMAGE_GRIDS[s % 4]`."""
    ids, types, pixel_inputs, _ = grid_prompt(
        segments, item_seeds, lambda seed: IMAGE_GRIDS[seed % len(IMAGE_GRIDS)], _qwen3_vl_item
    )
    return {"input_ids": torch.tensor([ids]), "mm_token_type_ids": torch.tensor([types]), **pixel_inputs}


register(
    FamilyCase(
        "cosmos3_omni",
        build_cosmos3_omni_inputs,
        per_token_keys=("mm_token_type_ids",),
        pixel_keys=("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"),
    )
)
