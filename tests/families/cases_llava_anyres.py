"""LLaVA-like families with one image per run, its placeholder count from its size: LLaVA-NeXT, LLaVA-NeXT-Video
and LLaVA-OneVision ("anyres": crops of the image in `(images, crops, C, H, W)`), and VipLLaVA (fixed size).

`cases_llava_video.py` (loaded after this file) registers LLaVA-NeXT-Video and LLaVA-OneVision again with videos.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
Placeholder counts follow each processor's own arithmetic (called on a stand-in where the processor can be imported),
never the drop-in under test. Shared pieces (tiny configs, seeded images, prompts, batches): `llava_like_inputs.py`.
"""

from __future__ import annotations

import functools
import types

import torch
import transformers
from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

from family_registry import FamilyCase, register
from llava_like_inputs import (
    TINY_CLIP_8PX,
    TINY_LLAMA,
    TINY_QWEN2,
    TINY_SIGLIP_8PX,
    collate_padded_patches,
    pad_dim,
    pixels,
    prompt_ids,
    size_of,
)
from vlmprep.testing import TINY_IMAGE_SIZE, TINY_IMAGE_TOKEN_ID, random_pixels

# -- LLaVA-NeXT -------------------------------------------------------------------------------------------------------

# Original (height, width) of the images (see `size_of`). Different aspect ratios pick different grid pinpoints and
# unpad differently, so the images of one prompt have different placeholder counts.
ANYRES_SIZES = [(8, 13), (13, 8), (6, 6), (16, 9)]
ANYRES_PINPOINTS = [[8, 8], [8, 16], [16, 8]]


def tiny_llava_next_config() -> transformers.LlavaNextConfig:
    return transformers.LlavaNextConfig(
        text_config=dict(TINY_LLAMA),
        vision_config=dict(TINY_CLIP_8PX),
        image_grid_pinpoints=ANYRES_PINPOINTS,
        image_token_index=TINY_IMAGE_TOKEN_ID,
        vision_feature_layer=-1,
    )


def llava_next_processor_stand_in(config) -> types.SimpleNamespace:
    """What `LlavaNextProcessor._get_number_of_features` reads from its processor, for this config."""
    stand_in = types.SimpleNamespace(
        image_processor=types.SimpleNamespace(image_grid_pinpoints=config.image_grid_pinpoints),
        patch_size=config.vision_config.patch_size,
        num_additional_image_tokens=1,  # CLIP's CLS token
    )
    processor_class = transformers.LlavaNextProcessor
    stand_in._get_unpadded_features = functools.partial(processor_class._get_unpadded_features, stand_in)
    return stand_in


def llava_next_tokens(config, image_size: tuple[int, int]) -> int:
    stand_in = llava_next_processor_stand_in(config)
    crop = config.vision_config.image_size
    count = transformers.LlavaNextProcessor._get_number_of_features(stand_in, *image_size, crop, crop)
    return count - 1 if config.vision_feature_select_strategy == "default" else count


def anyres_patches(config, image_size: tuple[int, int]) -> int:
    """Crops the image processor makes: the grid of the best pinpoint, plus the base crop."""
    return image_size_to_num_patches(image_size, config.image_grid_pinpoints, config.vision_config.image_size)


def build_llava_next_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    sizes = [size_of(seed, ANYRES_SIZES) for seed in image_seeds]
    runs = [[config.image_token_id] * llava_next_tokens(config, size) for size in sizes]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        crop = config.vision_config.image_size
        stacks = [
            pixels((anyres_patches(config, size), 3, crop, crop), seed)
            for size, seed in zip(sizes, image_seeds, strict=True)
        ]
        most = max(stack.shape[0] for stack in stacks)
        inputs["pixel_values"] = torch.stack(
            [pad_dim(stack, 0, most) for stack in stacks]
        )  # (images, patches, C, H, W)
        inputs["image_sizes"] = torch.tensor(sizes)
    return inputs


register(
    FamilyCase(
        "llava_next",
        transformers.LlavaNextForConditionalGeneration,
        tiny_llava_next_config,
        build_llava_next_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes"),
        collate=collate_padded_patches,
    )
)


# -- LLaVA-OneVision (images) -----------------------------------------------------------------------------------------


def tiny_llava_onevision_config() -> transformers.LlavaOnevisionConfig:
    # "anyres_max_1" makes every grid bigger than one crop's worth of tokens downsampled: that path is counted too.
    return transformers.LlavaOnevisionConfig(
        text_config=dict(TINY_QWEN2),
        vision_config=dict(TINY_SIGLIP_8PX),
        image_grid_pinpoints=ANYRES_PINPOINTS,
        image_token_index=TINY_IMAGE_TOKEN_ID,
        video_token_index=123,
        vision_aspect_ratio="anyres_max_1",
    )


def llava_onevision_tokens(config, image_size: tuple[int, int]) -> int:
    """`LlavaOnevisionProcessor`'s count for an image of a one-image sample (it gets its anyres grid)."""
    crop = config.vision_config.image_size
    stand_in = types.SimpleNamespace(
        image_processor=types.SimpleNamespace(image_grid_pinpoints=config.image_grid_pinpoints),
        num_image_tokens=(crop // config.vision_config.patch_size) ** 2,
        vision_aspect_ratio=config.vision_aspect_ratio,
    )
    processor_class = transformers.LlavaOnevisionProcessor
    stand_in._get_unpadded_features = functools.partial(processor_class._get_unpadded_features, stand_in)
    count = processor_class._get_number_of_features(stand_in, *image_size, crop, crop)
    return count - 1 if config.vision_feature_select_strategy == "default" else count


def build_llava_onevision_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """As the processor returns them for a flat list of images: `batch_num_images` all 1, every image with its grid."""
    sizes = [size_of(seed, ANYRES_SIZES) for seed in image_seeds]
    runs = [[config.image_token_id] * llava_onevision_tokens(config, size) for size in sizes]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        crop = config.vision_config.image_size
        stacks = [
            pixels((anyres_patches(config, size), 3, crop, crop), seed)
            for size, seed in zip(sizes, image_seeds, strict=True)
        ]
        most = max(stack.shape[0] for stack in stacks)
        inputs["pixel_values"] = torch.stack([pad_dim(stack, 0, most) for stack in stacks])  # (images, crops, C, H, W)
        inputs["image_sizes"] = torch.tensor(sizes)
        inputs["batch_num_images"] = torch.ones(len(sizes), dtype=torch.long)
    return inputs


register(
    FamilyCase(
        "llava_onevision",
        transformers.LlavaOnevisionForConditionalGeneration,
        tiny_llava_onevision_config,
        build_llava_onevision_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes", "batch_num_images"),
        collate=collate_padded_patches,
    )
)


# -- VipLLaVA: fixed resolution, one run per image --------------------------------------------------------------------


def tiny_vipllava_config() -> transformers.VipLlavaConfig:
    return transformers.VipLlavaConfig(
        text_config=dict(TINY_LLAMA),
        vision_config={**TINY_CLIP_8PX, "image_size": TINY_IMAGE_SIZE, "num_hidden_layers": 2},
        image_token_index=TINY_IMAGE_TOKEN_ID,
        vision_feature_layer=[-2, -1],
    )


def build_vipllava_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    vision = config.vision_config
    run = [config.image_token_id] * (vision.image_size // vision.patch_size) ** 2
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [run] * len(image_seeds))])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(1, seed) for seed in image_seeds])
    return inputs


register(
    FamilyCase(
        "vipllava",
        transformers.VipLlavaForConditionalGeneration,
        tiny_vipllava_config,
        build_vipllava_inputs,
        per_token_keys=(),
    )
)


# -- LLaVA-NeXT-Video (images): LLaVA-NeXT's anyres images ------------------------------------------------------------


def tiny_llava_next_video_config() -> transformers.LlavaNextVideoConfig:
    return transformers.LlavaNextVideoConfig(
        text_config=dict(TINY_LLAMA),
        vision_config=dict(TINY_CLIP_8PX),
        image_grid_pinpoints=ANYRES_PINPOINTS,
        image_token_index=TINY_IMAGE_TOKEN_ID,
        video_token_index=123,
        vision_feature_layer=-1,
    )


register(
    FamilyCase(
        "llava_next_video",
        transformers.LlavaNextVideoForConditionalGeneration,
        tiny_llava_next_video_config,
        build_llava_next_inputs,  # its processor writes images exactly as LLaVA-NeXT's
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes"),
        collate=collate_padded_patches,
    )
)
