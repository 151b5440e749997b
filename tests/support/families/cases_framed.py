"""HunYuanVL (`layouts.patch_grid_framed`), prompts and pixel inputs as `HunYuanVLProcessor` builds them.

Images are single-frame 4 px patches, `(total_patches, 3 * 4 * 4)`, with one `image_grid_thw` row per image. An image
is one run of `h' * (w' + 1) + 2` placeholders (`replace_image_token`: its merged rows, a separator after each, and
its begin and end embeddings), written between the image start and end tokens, which the processor marks 0 in the
`mm_token_type_ids` it returns (the run 1).

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, special tokens 110-121, text 3..99.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.patch_grid_inputs import IMAGE_GRIDS, grid_prompt
from vlmprep.testing import TINY_IMAGE_TOKEN_ID
from vlmprep.testing.configs.patch_grid import MERGE_SIZE, VISION_END, VISION_START

PATCH_SHAPE = (3 * 4 * 4,)  # one RGB 4 px patch per row


def image_grid(seed: int) -> tuple[int, int, int]:
    """`IMAGE_GRIDS[seed % 7 % 4]` (seed 7 is seed 0's, as the other patch-grid cases)."""
    return IMAGE_GRIDS[seed % 7 % len(IMAGE_GRIDS)]


def placeholder(medium: str, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    _, h, w = grid
    run = (h // MERGE_SIZE) * (w // MERGE_SIZE + 1) + 2
    return [VISION_START, *[TINY_IMAGE_TOKEN_ID] * run, VISION_END], [0, *[1] * run, 0]


def build_hunyuan_vl_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    ids, types, pixel_inputs, _ = grid_prompt(segments, image_seeds, image_grid, placeholder, PATCH_SHAPE)
    return {"input_ids": torch.tensor([ids]), "mm_token_type_ids": torch.tensor([types]), **pixel_inputs}


register(
    FamilyCase(
        "hunyuan_vl",
        build_hunyuan_vl_inputs,
        per_token_keys=("mm_token_type_ids",),
        pixel_keys=("pixel_values", "image_grid_thw"),
        one_row_with_items=True,
        skip=dict.fromkeys(
            ("chunked_batch_matches_unchunked_batch", "left_padded_batch_matches_solo_runs"),
            "upstream's `get_rope_index` numbers images across the whole batch, so a row with images is not its "
            "solo run beside another: the drop-in refuses batches with images in 2+ rows "
            "(tests/units/test_patch_grid_framed.py)",
        ),
    )
)
