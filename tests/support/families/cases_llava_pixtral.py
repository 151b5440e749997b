"""LLaVA-like families with Pixtral vision (any image size): Mistral3 (one image in several runs, rows of `[IMG]`
split by `[IMG_BREAK]`) and LightOnOCR (one run per image).

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
Placeholder counts follow each processor's own arithmetic (called on a stand-in where the processor can be imported),
never the drop-in under test. Shared pieces (seeded images, prompts, batches): `llava_like_inputs.py`.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import pad_dim, pixels, prompt_ids, size_of

# -- Mistral3 (Pixtral vision) ----------------------------------------------------------------------------------------

IMG_BREAK_ID, IMG_END_ID = 110, 111
# Processed (height, width) of the images (see `size_of`); 4x4 merged patches: rows of 1-4 `[IMG]` tokens.
PIXTRAL_SIZES = [(16, 16), (8, 16), (16, 8), (12, 8)]


def pixtral_image_tokens(config, image_size: tuple[int, int]) -> list[int]:
    """`PixtralProcessor.replace_image_token`'s layout: rows of `[IMG]` each closed by `[IMG_BREAK]`, the last one by
    `[IMG_END]` (written out here: the processor module needs torchvision, which is not installed)."""
    merged_patch = config.vision_config.patch_size * config.spatial_merge_size
    rows, columns = image_size[0] // merged_patch, image_size[1] // merged_patch
    ids = [token for _ in range(rows) for token in [config.image_token_id] * columns + [IMG_BREAK_ID]]
    return ids[:-1] + [IMG_END_ID]


def build_mistral3_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    sizes = [size_of(seed, PIXTRAL_SIZES) for seed in image_seeds]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [pixtral_image_tokens(config, s) for s in sizes])])}
    if image_seeds:
        side = config.vision_config.image_size
        images = [
            pad_dim(pad_dim(pixels((3, h, w), seed), 1, side), 2, side)
            for (h, w), seed in zip(sizes, image_seeds, strict=True)
        ]
        inputs["pixel_values"] = torch.stack(images)  # (images, C, H, W), padded to the largest image
        inputs["image_sizes"] = torch.tensor(sizes)
    return inputs


register(
    FamilyCase(
        "mistral3",
        build_mistral3_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes"),
        samples=("all_zero_mask_row",),
    )
)


# -- LightOnOCR: Pixtral vision, one run per image --------------------------------------------------------------------


def build_lighton_ocr_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """`LightOnOcrProcessor.replace_image_token`: `rows * columns` placeholders, no break tokens."""
    inputs = build_mistral3_inputs(config, segments, image_seeds)
    merged_patch = config.vision_config.patch_size * config.spatial_merge_size
    runs = [
        [config.image_token_id] * ((height // merged_patch) * (width // merged_patch))
        for height, width in (size_of(seed, PIXTRAL_SIZES) for seed in image_seeds)
    ]
    inputs["input_ids"] = torch.tensor([prompt_ids(segments, runs)])
    return inputs


register(
    FamilyCase(
        "lighton_ocr",
        build_lighton_ocr_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes"),
        samples=("text_only_refusal",),
    )
)
