"""Families whose images become vocabulary tokens of a VQ-VAE: prompts and pixel inputs as their processors build them.

- Chameleon: one fixed-size image per `pixel_values` entry, written as `<racm3:break>`, `image_seq_length` `<image>`
  placeholders, `<eoss>` (here the tiny start/end ids 120 and 121);
- Janus: one fixed-size image per `pixel_values` entry, written as `<begin_of_image>`, `num_image_tokens`
  placeholders (a token per SigLIP patch), `<end_of_image>`.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import prompt_ids
from vlmprep.models.chameleon import vq_image_tokens
from vlmprep.testing import TINY_BOI_TOKEN_ID, TINY_EOI_TOKEN_ID, random_pixels


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


register(FamilyCase("chameleon", build_chameleon_inputs, per_token_keys=()))


def build_janus_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    # `JanusProcessor.replace_image_token`: start token, `num_image_tokens` placeholders, end token.
    return framed_image_inputs(segments, image_seeds, [config.image_token_id] * config.vision_config.num_image_tokens)


register(FamilyCase("janus", build_janus_inputs, per_token_keys=()))
