"""Families whose images have one fixed size: prompts and pixel inputs as each family's processor builds them.

- VipLLaVA, DeepSeek-VL and Video-LLaVA (images): one image per run of `(image_size / patch_size) ** 2` placeholders,
  `pixel_values` `(images, C, H, W)` (`llava_like_inputs.build_patch_run_inputs`);
- DeepSeek-VL-Hybrid: DeepSeek-VL's runs, plus a SAM copy of every image in `high_res_pixel_values`;
- Aria: one crop per item, crops flattened in `pixel_values` with their `pixel_mask`, an image's crops one run.

Gemma3, PaliGemma and LLaVA, whose prompts `vlmprep.testing.build_prompt` builds, are in `cases_foundation.py`.
Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import build_patch_run_inputs, prompt_ids, tile_pixels, tiles_of
from vlmprep.testing import TINY_IMAGE_SIZE, random_pixels
from vlmprep.testing.configs.fixed_size import ARIA_PATCH_TO_QUERY

for name in ("vipllava", "deepseek_vl", "video_llava"):
    register(FamilyCase(name, build_patch_run_inputs, per_token_keys=()))


def build_deepseek_vl_hybrid_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    inputs = build_patch_run_inputs(config, segments, image_seeds)  # the processor writes DeepSeek-VL's runs
    if image_seeds:
        # The image processor resizes each image twice: SigLIP's size and SAM's (high-resolution) size.
        size = config.high_res_vision_config.image_size
        inputs["high_res_pixel_values"] = torch.cat([random_pixels(1, seed + 1000, size=size) for seed in image_seeds])
    return inputs


register(
    FamilyCase(
        "deepseek_vl_hybrid",
        build_deepseek_vl_hybrid_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "high_res_pixel_values"),
    )
)


# -- Aria -------------------------------------------------------------------------------------------------------------


def aria_crop_masks(seed: int, crops: int) -> torch.Tensor:
    """`(crops, H, W)`: the image processor pads each crop to a square; odd seeds' crops are padded on the right."""
    mask = torch.ones(crops, TINY_IMAGE_SIZE, TINY_IMAGE_SIZE, dtype=torch.long)
    if seed % 2:
        mask[..., TINY_IMAGE_SIZE - 5 :] = 0
    return mask


def build_aria_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    # The processor's `size_conversion`: a 16 px crop is (16 / 4) ** 2 = 16 patches -> 4 queries.
    tokens_per_crop = ARIA_PATCH_TO_QUERY[(TINY_IMAGE_SIZE // config.vision_config.patch_size) ** 2]
    # `AriaProcessor`: each `<|img|>` becomes `num_crops * tokens_per_image` placeholders.
    runs = [[config.image_token_id] * (tiles_of(seed) * tokens_per_crop) for seed in image_seeds]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        inputs["pixel_values"] = tile_pixels(config, image_seeds)  # (crops, C, H, W)
        inputs["pixel_mask"] = torch.cat([aria_crop_masks(seed, tiles_of(seed)) for seed in image_seeds])
    return inputs


register(FamilyCase("aria", build_aria_inputs, per_token_keys=(), pixel_keys=("pixel_values", "pixel_mask")))
