"""Families whose images become vocabulary tokens of a VQ-VAE: prompts and pixel inputs as their processors build them.

- Chameleon: one fixed-size image per `pixel_values` entry, written as `<racm3:break>`, `image_seq_length` `<image>`
  placeholders, `<eoss>` (here the tiny start/end ids 120 and 121);
- Janus: one fixed-size image per `pixel_values` entry, written as `<begin_of_image>`, `num_image_tokens`
  placeholders (a token per SigLIP patch), `<end_of_image>`;
- Emu3: images of any size padded into one `pixel_values` tensor with their `image_sizes`, each one run of
  `h * (w + 1)` placeholders (its grid of codes, an end of line per row) between its start tokens and end tokens.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import prompt_ids, size_of
from vlmprep.models.chameleon import vq_image_tokens
from vlmprep.models.emu3 import vq_spatial_factor
from vlmprep.testing import TINY_BOI_TOKEN_ID, TINY_EOI_TOKEN_ID, TINY_IMAGE_SIZE, random_pixels


def framed_image_inputs(segments: list, image_seeds: list[int], placeholders: list[int]) -> dict:
    """Each image as the start token, its placeholders, the end token; `pixel_values` `(images, C, H, W)`."""
    run = [TINY_BOI_TOKEN_ID, *placeholders, TINY_EOI_TOKEN_ID]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [run] * len(image_seeds))])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(1, seed) for seed in image_seeds])
    return inputs


def build_chameleon_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    # `ChameleonProcessor.replace_image_token`: start token, `image_seq_length` placeholders, end token; the
    # processor's `image_seq_length` is the VQ-VAE's latent grid (1024 for the released 512 px model).
    return framed_image_inputs(segments, image_seeds, [config.image_token_id] * vq_image_tokens(config))


register(
    FamilyCase(
        "chameleon",
        build_chameleon_inputs,
        per_token_keys=(),
        skip={
            "bad_input_wrong_resolution": (
                "the VQ-VAE codes images of any size, as upstream's (the count of codes follows the size: a prompt "
                "built for another size is refused by its placeholder count; tests/units/test_chameleon_pixel_size.py)"
            )
        },
    )
)


def build_janus_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    # `JanusProcessor.replace_image_token`: start token, `num_image_tokens` placeholders, end token.
    return framed_image_inputs(segments, image_seeds, [config.image_token_id] * config.vision_config.num_image_tokens)


register(FamilyCase("janus", build_janus_inputs, per_token_keys=()))


# Emu3's `<|image token|>` before an image's placeholders and `<|extra_201|>` after them.
EMU3_WRAPPER_ID, EMU3_END_OF_FRAME_ID = 117, 118
# Emu3 images: (height, width) by seed, multiples of the tiny VQ-VAE's downsampling (4).
EMU3_SIZES = [(16, 16), (12, 8), (8, 16), (16, 12)]


def build_emu3_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    factor = vq_spatial_factor(config)
    runs = []
    for seed in image_seeds:
        height, width = size_of(seed, EMU3_SIZES)
        # `Emu3Processor.replace_image_token`: `<|image start|>`, the grid as text (`{h}*{w}`, here two text ids),
        # `<|image token|>`, `h * (w + 1)` placeholders, `<|extra_201|>`, `<|image end|>`.
        placeholders = [config.image_token_id] * ((height // factor) * (width // factor + 1))
        grid_text = [height // factor + 10, width // factor + 10]
        runs.append(
            [TINY_BOI_TOKEN_ID, *grid_text, EMU3_WRAPPER_ID, *placeholders, EMU3_END_OF_FRAME_ID, TINY_EOI_TOKEN_ID]
        )
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        sizes = [size_of(seed, EMU3_SIZES) for seed in image_seeds]
        # The image processor zero-pads a batch's images (bottom, right) to its largest. Here every image is padded
        # to the largest of any batch (16x16), so that a prompt's pixels are the same alone and in a batch: the
        # VQ-VAE normalizes over the padded image, and other padding gives other codes (upstream too).
        canvas = torch.zeros(len(image_seeds), 3, TINY_IMAGE_SIZE, TINY_IMAGE_SIZE)
        for index, (seed, (height, width)) in enumerate(zip(image_seeds, sizes, strict=True)):
            canvas[index, :, :height, :width] = random_pixels(1, seed)[0, :, :height, :width]
        inputs["pixel_values"] = canvas
        inputs["image_sizes"] = torch.tensor(sizes)
    return inputs


register(
    FamilyCase(
        "emu3",
        build_emu3_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes"),
        refused_train_parts=("vision",),
        skip={
            "bad_input_wrong_resolution": (
                "any canvas holding every image of `image_sizes` is valid Emu3 input (the processor pads a batch's "
                "images to its largest), so larger pixels are not malformed; smaller ones are refused"
            )
        },
    )
)
