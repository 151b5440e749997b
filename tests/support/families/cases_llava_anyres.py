"""LLaVA-like families with one image per run, its placeholder count from its size ("anyres": crops of the image in
`(images, crops, C, H, W)`): LLaVA-NeXT, LLaVA-NeXT-Video and LLaVA-OneVision.

`cases_llava_video.py` (loaded after this file) registers LLaVA-NeXT-Video and LLaVA-OneVision again with videos.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
Placeholder counts follow each processor's own arithmetic (called on a stand-in where the processor can be imported),
never the drop-in under test. Shared pieces (seeded images, prompts, batches): `llava_like_inputs.py`.
"""

from __future__ import annotations

import functools
import types

import torch
import transformers
from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

from support.cases import FamilyCase, register
from support.llava_like_inputs import pad_dim, pixels, prompt_ids, size_of

# Original (height, width) of the images (see `size_of`). Different aspect ratios pick different grid pinpoints and
# unpad differently, so the images of one prompt have different placeholder counts.
ANYRES_SIZES = [(8, 13), (13, 8), (6, 6), (16, 9)]


def processor_features(processor_class, config, image_size: tuple[int, int], **processor_attributes) -> int:
    """`processor_class._get_number_of_features` for an image, called on a stand-in of the processor holding the
    config's grid pinpoints and `processor_attributes`; minus the CLS token for the "default" feature strategy."""
    image_processor = types.SimpleNamespace(image_grid_pinpoints=config.image_grid_pinpoints)
    stand_in = types.SimpleNamespace(image_processor=image_processor, **processor_attributes)
    stand_in._get_unpadded_features = functools.partial(processor_class._get_unpadded_features, stand_in)
    crop = config.vision_config.image_size
    count = processor_class._get_number_of_features(stand_in, *image_size, crop, crop)
    return count - 1 if config.vision_feature_select_strategy == "default" else count


def llava_next_tokens(config, image_size: tuple[int, int]) -> int:
    """`LlavaNextProcessor`'s count (CLIP adds a CLS token per crop)."""
    attributes = {"patch_size": config.vision_config.patch_size, "num_additional_image_tokens": 1}
    return processor_features(transformers.LlavaNextProcessor, config, image_size, **attributes)


def llava_onevision_tokens(config, image_size: tuple[int, int]) -> int:
    """`LlavaOnevisionProcessor`'s count for an image of a one-image sample (it gets its anyres grid)."""
    vision = config.vision_config
    tokens_per_crop = (vision.image_size // vision.patch_size) ** 2
    attributes = {"num_image_tokens": tokens_per_crop, "vision_aspect_ratio": config.vision_aspect_ratio}
    return processor_features(transformers.LlavaOnevisionProcessor, config, image_size, **attributes)


def anyres_patches(config, image_size: tuple[int, int]) -> int:
    """Crops the image processor makes: the grid of the best pinpoint, plus the base crop."""
    return image_size_to_num_patches(image_size, config.image_grid_pinpoints, config.vision_config.image_size)


def anyres_inputs(image_tokens, images_per_sample: bool = False):
    """A builder of anyres prompts: each image's run of `image_tokens(config, size)` placeholders, its crops padded
    to the most crops of the prompt in `pixel_values` `(images, crops, C, H, W)`, and `image_sizes`.

    With `images_per_sample` it also returns `batch_num_images`, as LLaVA-OneVision's processor does: all 1 for a flat
    list of images, every image with its grid.
    """

    def build_inputs(config, segments: list, image_seeds: list[int]) -> dict:
        sizes = [size_of(seed, ANYRES_SIZES) for seed in image_seeds]
        runs = [[config.image_token_id] * image_tokens(config, size) for size in sizes]
        inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
        if image_seeds:
            crop = config.vision_config.image_size
            stacks = [
                pixels((anyres_patches(config, size), 3, crop, crop), seed)
                for size, seed in zip(sizes, image_seeds, strict=True)
            ]
            most = max(stack.shape[0] for stack in stacks)
            inputs["pixel_values"] = torch.stack([pad_dim(stack, 0, most) for stack in stacks])
            inputs["image_sizes"] = torch.tensor(sizes)
            if images_per_sample:
                inputs["batch_num_images"] = torch.ones(len(sizes), dtype=torch.long)
        return inputs

    return build_inputs


build_llava_next_inputs = anyres_inputs(llava_next_tokens)

for name, build_inputs, extra_keys in (
    ("llava_next", build_llava_next_inputs, ()),
    ("llava_next_video", build_llava_next_inputs, ()),  # its processor writes images exactly as LLaVA-NeXT's
    ("llava_onevision", anyres_inputs(llava_onevision_tokens, images_per_sample=True), ("batch_num_images",)),
):
    register(
        FamilyCase(
            name,
            build_inputs,
            per_token_keys=(),
            pixel_keys=("pixel_values", "image_sizes", *extra_keys),
            samples=("chat",) if name == "llava_next" else (),
            unread_inputs=frozenset({"image_sizes_videos"}) if name == "llava_onevision" else frozenset(),
        )
    )
