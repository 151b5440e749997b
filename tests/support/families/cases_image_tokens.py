"""Families whose images become vocabulary tokens of a VQ-VAE: prompts and pixel inputs as their processors build them.

- Chameleon: one fixed-size image per `pixel_values` entry, written as `<racm3:break>`, `image_seq_length` `<image>`
  placeholders, `<eoss>` (here the tiny start/end ids 120 and 121).

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import prompt_ids
from vlmprep.models.chameleon import vq_image_tokens
from vlmprep.testing import TINY_BOI_TOKEN_ID, TINY_EOI_TOKEN_ID, random_pixels


def build_chameleon_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    # `ChameleonProcessor.replace_image_token`: start token, `image_seq_length` placeholders, end token; the
    # processor's `image_seq_length` is the VQ-VAE's latent grid (1024 for the released 512 px model).
    run = [TINY_BOI_TOKEN_ID, *[config.image_token_id] * vq_image_tokens(config), TINY_EOI_TOKEN_ID]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [run] * len(image_seeds))])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(1, seed) for seed in image_seeds])
    return inputs


register(FamilyCase("chameleon", build_chameleon_inputs, per_token_keys=()))
