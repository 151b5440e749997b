"""Unlimited-OCR: an image is one run of its crops' rows, its global view's rows and a separator, from a global view
(`pixel_values`), crops (`pixel_values_local`), their counts (`num_local_patches`) and grids (`patches_grid`).

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, text 3..99. Placeholder counts follow the
processor's arithmetic (`UnlimitedOcrProcessor.replace_image_token`), never the drop-in under test. The processor
returns the counts and grids as lists (upstream splits the crops' features by them), so batches are collated here.
"""

from __future__ import annotations

import math

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import global_and_local_views, prompt_ids, square_pixels, tiles_of
from vlmprep.testing.configs.uocr import UNLIMITED_OCR_CROP_SIDE, UNLIMITED_OCR_GLOBAL_SIDE

# The processor's `downsample_ratio`: the tower's two stride-2 convolutions.
UOCR_DOWNSAMPLE_RATIO = 4
# The scenario doubles the views' size expecting a fixed-resolution tower; this one interpolates its position
# embeddings (SAM's and the encoder's) and a larger view needs more placeholders: the refusal names both counts.
VIEWS_OF_ANY_SIZE = (
    "the tower takes views of any size (interpolated position embeddings) and a larger view needs more placeholders, "
    "so a prompt built for the processor's size is refused as a placeholder-count mismatch that names both counts"
)
# Inputs with one list entry per image (the processor leaves them lists).
UOCR_LIST_KEYS = ("num_local_patches", "patches_grid")


def uocr_queries(config, side: int) -> int:
    """Queries a side of a view of `side` px: `ceil(side // patch_size / downsample_ratio)`."""
    return math.ceil(side // config.vision_config.sam_config.patch_size / UOCR_DOWNSAMPLE_RATIO)


def uocr_grid(seed: int) -> list[int]:
    """`(columns, rows)` of the image drawn with `seed`: 2x1 crops when `tiles_of(seed) == 3`, else none (`[1, 1]`)."""
    return [2, 1] if tiles_of(seed) == 3 else [1, 1]


def uocr_image_tokens(config, seed: int) -> list[int]:
    """`replace_image_token`: `q * (q + 1) + 1` for the global view and separator, plus `(rows * ql) * (columns * ql
    + 1)` for the crops."""
    global_side, crop_side = (
        uocr_queries(config, UNLIMITED_OCR_GLOBAL_SIDE),
        uocr_queries(config, UNLIMITED_OCR_CROP_SIDE),
    )
    count = global_side * (global_side + 1) + 1
    if tiles_of(seed) > 1:
        columns, rows = uocr_grid(seed)
        count += rows * crop_side * (columns * crop_side + 1)
    return [config.image_token_id] * count


def build_unlimited_ocr_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """Ids with each image's run; `pixel_values` `(images, 3, 16, 16)`, `pixel_values_local` `(crops, 3, 16, 16)`
    (when any image has crops), `num_local_patches` and `patches_grid` lists."""
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [uocr_image_tokens(config, s) for s in image_seeds])])}
    if image_seeds:
        views, crops = global_and_local_views(
            image_seeds, square_pixels(UNLIMITED_OCR_GLOBAL_SIDE), square_pixels(UNLIMITED_OCR_CROP_SIDE)
        )
        inputs.update(views, num_local_patches=crops)
        inputs["patches_grid"] = [uocr_grid(seed) for seed in image_seeds]
    return inputs


register(
    FamilyCase(
        "unlimited_ocr",
        build_unlimited_ocr_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "pixel_values_local", *UOCR_LIST_KEYS),
        skip={"bad_input_wrong_resolution": VIEWS_OF_ANY_SIZE},
    )
)
