"""A family whose image indicator tokens get vision embeddings: Ovis2 (a global crop, then a grid of crops for a tiled
image, each crop its own run between indicator tokens).

Token ids follow `vlmprep.testing`; the indicator ids are the tiny config's `visual_indicator_token_ids`.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import prompt_ids, tile_pixels, tiles_of

IMG_START, IMG_GRID, IMG_COL, IMG_ROW, IMG_END = 115, 116, 117, 118, 119


def ovis2_image_tokens(config, crops: int) -> list[int]:
    """`Ovis2Processor.replace_image_token`: the global crop's run after `<IMG_START>`, `<IMG_GRID>`, then for a tiled
    image (a grid of one row of `crops - 1` tiles) the tiles' runs split by `<IMG_COL>`, and `<IMG_END>`; every crop a
    run of `image_seq_length` (patches grouped by `hidden_stride ** 2`) placeholders."""
    vision = config.vision_config
    run = [config.image_token_id] * ((vision.image_size // vision.patch_size) ** 2 // vision.hidden_stride**2)
    ids = [IMG_START, *run, IMG_GRID]
    for tile in range(crops - 1 if crops > 1 else 0):
        ids += [*run, IMG_COL] if tile < crops - 2 else run
    return [*ids, IMG_END]


def build_ovis2_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """The crops of every image in prompt order, `(crops, C, H, W)`."""
    runs = [ovis2_image_tokens(config, tiles_of(seed)) for seed in image_seeds]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        inputs["pixel_values"] = tile_pixels(config, image_seeds)
    return inputs


register(FamilyCase("ovis2", build_ovis2_inputs, per_token_keys=(), pixel_keys=("pixel_values",)))
