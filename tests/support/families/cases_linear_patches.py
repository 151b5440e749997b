"""Fuyu: images cut into flattened patches, each embedded by one linear layer, as its processor builds them.

An image of `h x w` patches is `h` rows of `w` `|SPEAKER|` placeholders, each row ended by `|NEWLINE|`, then `<s>`;
`pixel_values` holds every image's patches back to back, `(patches, C * p * p)`.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import prompt_ids, size_of
from vlmprep.testing import random_pixels

# Fuyu's `|NEWLINE|`, which ends every row of an image's placeholders.
FUYU_NEWLINE_ID = 118
# Image sizes (height, width) in pixels by seed, multiples of the tiny 4 px patch.
FUYU_SIZES = [(16, 16), (8, 12), (12, 8), (16, 8)]


def patchify(image: torch.Tensor, patch_size: int) -> torch.Tensor:
    """`(patches, C * p * p)` of a `(C, H, W)` image, row by row, as `FuyuImageProcessor.patchify_image` orders them."""
    channels = image.shape[0]
    patches = image.unfold(1, patch_size, patch_size).unfold(2, patch_size, patch_size)  # (C, rows, cols, p, p)
    return patches.permute(1, 2, 3, 4, 0).reshape(-1, channels * patch_size * patch_size)


def build_fuyu_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    patch = config.patch_size
    runs, patches = [], []
    for seed in image_seeds:
        height, width = size_of(seed, FUYU_SIZES)
        # `FuyuProcessor.replace_image_token`: a row of placeholders and `|NEWLINE|` per row of patches, then `<s>`.
        row = [config.image_token_id] * (width // patch) + [FUYU_NEWLINE_ID]
        runs.append(row * (height // patch) + [config.text_config.bos_token_id])
        patches.append(patchify(random_pixels(1, seed, size=16)[0, :, :height, :width], patch))
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat(patches)
    return inputs


# The scenarios that count encoded images count items, here patches: tests/units/test_fuyu_patches.py runs the same
# checks (exact in every generation mode, each patch encoded once, cached images not encoded) counting patches.
_PATCHES_COUNTED = "counts encoded images, which are patches here: tests/units/test_fuyu_patches.py counts patches"
register(
    FamilyCase(
        "fuyu",
        build_fuyu_inputs,
        unread_inputs=frozenset({"image_patches"}),
        per_token_keys=(),
        skip={
            "generate_matches_transformers": _PATCHES_COUNTED,
            "new_image_next_to_cached_image_encodes_only_the_new_one": _PATCHES_COUNTED,
            "cache_from_prompt_truncated_inside_image": _PATCHES_COUNTED,
            "left_padded_batch_matches_solo_runs": _PATCHES_COUNTED,
        },
    )
)
