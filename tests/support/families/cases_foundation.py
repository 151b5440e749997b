"""Gemma3, PaliGemma and LLaVA: fixed-resolution families whose prompts `vlmprep.testing.build_prompt` builds."""

import torch

from support.cases import FamilyCase, register
from vlmprep.testing import build_prompt, random_pixels


def build_fixed_resolution_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    ids, types = build_prompt(config, segments)
    inputs = {"input_ids": torch.tensor([ids])}
    if types is not None:
        inputs["token_type_ids"] = torch.tensor([types])
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(1, seed) for seed in image_seeds])
    return inputs


register(
    FamilyCase(
        "gemma3",
        build_fixed_resolution_inputs,
        samples=("foundation", "chat", "mainstream", "all_zero_mask_row", "text_only_refusal", "drafted_placeholder"),
    )
)
# PaliGemma's suffix (answer) tokens have token type 1: causal, after the bidirectional prefix.
register(
    FamilyCase(
        "paligemma",
        build_fixed_resolution_inputs,
        answer_token_types={"token_type_ids": 1},
        samples=("foundation", "all_zero_mask_row"),
    )
)
register(
    FamilyCase(
        "llava",
        build_fixed_resolution_inputs,
        samples=("foundation", "chat", "mainstream", "all_zero_mask_row", "pixel_checks", "text_only_refusal"),
    )
)
