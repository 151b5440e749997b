"""Inkling2 and Inkling2-Loop: prompts and pixel inputs as `Inkling2Processor` and `Inkling2ImageProcessor` build them.

An image's grid `(t, h, w)` counts placeholders (squares of 2x2 patches of 4 px): `pixel_values` has one row per
placeholder, `(8, 8, 3)` pixels channels last, and the image is one run of `t * h * w` placeholders with no start or
end token (`replace_image_token`). The processor returns no `mm_token_type_ids`.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, special tokens 110-121, text 3..99.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.segments import with_seeds
from vlmprep.testing import TINY_IMAGE_TOKEN_ID
from vlmprep.testing.configs.patch_grid import MERGE_SIZE, PATCH_SIZE

# Grid `(t, h, w)` in placeholders of the image drawn with seed `s`: `TOKEN_GRIDS[s % 7 % 4]` (16x16, 8x16, 16x24 and
# 24x8 px); seed 7 has seed 0's grid.
TOKEN_GRIDS = [(1, 2, 2), (1, 1, 2), (1, 2, 3), (1, 3, 1)]
SQUARE = MERGE_SIZE * PATCH_SIZE  # pixels per side of one placeholder's square


def build_token_grid_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    ids: list[int] = []
    squares, grids = [], []
    for segment, seed in with_seeds(segments, image_seeds):
        if seed is None:
            ids += segment
            continue
        grid = TOKEN_GRIDS[seed % 7 % len(TOKEN_GRIDS)]
        count = grid[0] * grid[1] * grid[2]
        ids += [TINY_IMAGE_TOKEN_ID] * count
        # in [-1, 1], as the image processor scales them
        pixels = torch.rand(count, SQUARE, SQUARE, 3, generator=torch.Generator().manual_seed(seed)) * 2 - 1
        squares.append(pixels)
        grids.append(grid)
    inputs = {"input_ids": torch.tensor([ids])}
    if grids:
        inputs["pixel_values"] = torch.cat(squares)  # (placeholders, 8, 8, 3)
        inputs["image_grid_thw"] = torch.tensor(grids)
    return inputs


for name in ("inkling2", "inkling2_loop"):
    register(
        FamilyCase(name, build_token_grid_inputs, per_token_keys=(), pixel_keys=("pixel_values", "image_grid_thw"))
    )
