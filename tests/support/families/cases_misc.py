"""Q-Former families: prompts and pixel inputs as their processors build them.

- BLIP-2: each image is one run of `num_query_tokens` placeholders (`Blip2Processor` writes the run where the image
  is), `pixel_values` `(images, C, H, W)` at the tower's size.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import prompt_ids
from vlmprep.testing import random_pixels


def build_query_run_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """One fixed-size image per run of the Q-Former's `num_query_tokens` placeholders."""
    run = [config.image_token_id] * config.num_query_tokens
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [run] * len(image_seeds))])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(1, seed) for seed in image_seeds])
    return inputs


register(
    FamilyCase(
        "blip-2",
        build_query_run_inputs,
        per_token_keys=(),
        upstream_needs_items=True,
        skip={
            "cached_text_prefix_then_image_turn": (
                "transformers' forward needs `pixel_values` on every call, so it cannot fill the text prefix's cache; "
                "a text prefix resumed from the prefix store: test_prefix_cache.py"
            )
        },
    )
)
