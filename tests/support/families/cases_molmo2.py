"""Molmo2: an image is its crops (a low-resolution view, then high-resolution crops), each placeholder pooling 2x2
patches of one crop by its row of `image_token_pooling`, which indexes the patches of every crop of the call
(transformers 5.24) or of its own image's crops (5.25 on), as the installed processor writes it.

Token ids follow `vlmprep.testing`: vocabulary 128, `<im_patch>` 122, `<im_start>` 120, `<im_end>` 121,
`<low_res_im_start>` 118, `<im_col>` 119, text 3..99. The layout follows `Molmo2Processor.replace_image_token` (column
tokens after every row) and the image processor's pooling windows, never the drop-in under test.
"""

from __future__ import annotations

import inspect

import torch
import transformers

from support.cases import FamilyCase, register
from support.llava_like_inputs import pixels, tiles_of
from vlmprep.testing import IMAGE
from vlmprep.testing.configs.molmo2 import MOLMO2_COLUMN_ID, MOLMO2_LOW_RES_START_ID

MOLMO2_IMAGE_START, MOLMO2_IMAGE_END = 120, 121
# 5.25 changed processor and model together: the processor stopped shifting each image's indices past the crops before
# it, and `get_image_features` took `image_num_crops` to do it. The processor cannot run here (it needs torchvision), so
# its convention is read from the model's signature, upstream's, never the drop-in's.
POOLING_PER_IMAGE = "image_num_crops" in inspect.signature(transformers.Molmo2Model.get_image_features).parameters
# A crop is 4x4 patches, pooled 2x2: 2x2 tokens per crop
PATCHES_SIDE, POOL = 4, 2
TOKENS_SIDE = PATCHES_SIDE // POOL


def molmo2_grid(seed: int) -> list[int]:
    """`image_grids` row: the low-resolution view's 2x2 tokens, then the high-resolution crops side by side (two
    crops for multi-tile seeds, none otherwise)."""
    high_crops = tiles_of(seed) - 1
    return [TOKENS_SIDE, TOKENS_SIDE, TOKENS_SIDE if high_crops else 0, TOKENS_SIDE * high_crops]


def molmo2_image_tokens(config, seed: int) -> list[int]:
    """The low-resolution grid in `<low_res_im_start>...<im_end>`, the high-resolution one in `<im_start>...<im_end>`,
    each row of `<im_patch>` followed by `<im_col>`."""
    low_h, low_w, high_h, high_w = molmo2_grid(seed)
    patch = config.image_token_id
    low = [MOLMO2_LOW_RES_START_ID, *([patch] * low_w + [MOLMO2_COLUMN_ID]) * low_h, MOLMO2_IMAGE_END]
    return [*low, MOLMO2_IMAGE_START, *([patch] * high_w + [MOLMO2_COLUMN_ID]) * high_h, MOLMO2_IMAGE_END]


def molmo2_pooling(seed: int) -> torch.Tensor:
    """`(tokens, 4)`: each token's 2x2 window of its crop's patches, as indices into the image's crops."""
    low_h, low_w, high_h, high_w = molmo2_grid(seed)
    rows = []
    for height, width, first_crop in ((low_h, low_w, 0), (high_h, high_w, 1)):
        for row in range(height):
            for col in range(width):
                crop, col_in_crop = first_crop + col // TOKENS_SIDE, col % TOKENS_SIDE
                top, left = row * POOL, col_in_crop * POOL
                window = [(top + i) * PATCHES_SIDE + left + j for i in range(POOL) for j in range(POOL)]
                rows.append([crop * PATCHES_SIDE**2 + index for index in window])
    return torch.tensor(rows, dtype=torch.long)


def image_inputs(config, seeds: list[int]) -> dict:
    """`pixel_values` `(crops, 16, 48)`, `image_token_pooling` into all of them (5.24) or each into its image's own
    (5.25 on), `image_grids`, `image_num_crops`."""
    patch_dim = config.vision_config.patch_size**2 * config.vision_config.num_channels
    crops = [pixels((tiles_of(seed), PATCHES_SIDE**2, patch_dim), seed) for seed in seeds]
    pooling, offset = [], 0
    for seed, image_crops in zip(seeds, crops, strict=True):
        pooling.append(molmo2_pooling(seed) + offset)
        offset += 0 if POOLING_PER_IMAGE else image_crops.shape[0] * PATCHES_SIDE**2
    return {
        "pixel_values": torch.cat(crops),
        "image_token_pooling": torch.cat(pooling),
        "image_grids": torch.tensor([molmo2_grid(seed) for seed in seeds]),
        "image_num_crops": torch.tensor([tiles_of(seed) for seed in seeds]),
    }


def token_types(input_ids: torch.Tensor) -> torch.Tensor:
    """The processor's `mm_token_type_ids`: 1 at every image token (start, patch, column and end tokens), else 0."""
    return ((input_ids >= MOLMO2_LOW_RES_START_ID) & (input_ids <= 122)).long()


def build_molmo2_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """Ids with each image's tokens, `mm_token_type_ids` and the image inputs (seeds in prompt order)."""
    seeds = iter(image_seeds)
    ids = [
        token
        for segment in segments
        for token in (molmo2_image_tokens(config, next(seeds)) if segment is IMAGE else segment)
    ]
    inputs = {"input_ids": torch.tensor([ids])}
    inputs["mm_token_type_ids"] = token_types(inputs["input_ids"])
    if image_seeds:
        inputs.update(image_inputs(config, image_seeds))
    return inputs


register(
    FamilyCase(
        "molmo2",
        build_molmo2_inputs,
        unread_inputs=frozenset({"pixel_values_videos", "video_token_pooling", "video_grids"}),
        per_token_keys=("mm_token_type_ids",),
        pixel_keys=("pixel_values", "image_token_pooling", "image_grids", "image_num_crops"),
    )
)
