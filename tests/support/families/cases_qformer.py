"""Q-Former families: prompts and pixel inputs as their processors build them.

- BLIP-2: each image is one run of `num_query_tokens` placeholders (`Blip2Processor` writes the run where the image
  is), `pixel_values` `(images, C, H, W)` at the tower's size;
- InstructBLIP: BLIP-2's runs, and each image's instruction for the Q-Former as Q-Former ids (`qformer_input_ids`,
  `qformer_attention_mask`, one row per image): the prompt's text before the image, its last `INSTRUCTION_LENGTH`
  tokens, padded to that length (the processor pads a batch's instructions to one length). A turn appended later
  leaves an earlier image's instruction as it was, as a chat app re-sending it would (a caller's cache holds the
  image encoded with it).
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import prompt_ids
from vlmprep.testing import IMAGE, random_pixels


def build_query_run_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """One fixed-size image per run of the Q-Former's `num_query_tokens` placeholders."""
    run = [config.image_token_id] * config.num_query_tokens
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [run] * len(image_seeds))])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(1, seed) for seed in image_seeds])
    return inputs


# Q-Former ids per instruction: the first text tokens of the prompt, padded (id 0, masked) to this length.
INSTRUCTION_LENGTH = 6


def instructions_of(segments: list) -> tuple[list[list[int]], list[list[int]]]:
    """Q-Former ids and mask of each image of a prompt: the last `INSTRUCTION_LENGTH` text tokens before it, padded."""
    ids, masks, text = [], [], []
    for segment in segments:
        if segment is not IMAGE:
            text += list(segment)
            continue
        instruction = text[-INSTRUCTION_LENGTH:]
        padding = INSTRUCTION_LENGTH - len(instruction)
        ids.append(instruction + [0] * padding)
        masks.append([1] * len(instruction) + [0] * padding)
    return ids, masks


def build_instructed_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """BLIP-2's runs, and one instruction row per image."""
    inputs = build_query_run_inputs(config, segments, image_seeds)
    if image_seeds:
        ids, masks = instructions_of(segments)
        inputs["qformer_input_ids"] = torch.tensor(ids)
        inputs["qformer_attention_mask"] = torch.tensor(masks)
    return inputs


# transformers' forward needs the items on every call, so it cannot fill a text prefix's cache.
_TEXT_PREFIX_SKIP = {
    "cached_text_prefix_then_image_turn": (
        "transformers' forward needs `pixel_values` on every call, so it cannot fill the text prefix's cache; a text "
        "prefix resumed from the prefix store: test_prefix_cache.py"
    )
}

register(
    FamilyCase(
        "blip-2",
        build_query_run_inputs,
        unread_inputs=frozenset({"decoder_input_ids", "decoder_attention_mask", "interpolate_pos_encoding"}),
        per_token_keys=(),
        upstream_needs_items=True,
        skip=_TEXT_PREFIX_SKIP,
    )
)
register(
    FamilyCase(
        "instructblip",
        build_instructed_inputs,
        unread_inputs=frozenset({"decoder_input_ids", "decoder_attention_mask", "interpolate_pos_encoding"}),
        per_token_keys=(),
        pixel_keys=("pixel_values", "qformer_input_ids", "qformer_attention_mask"),
        upstream_needs_items=True,
        skip=_TEXT_PREFIX_SKIP,
    )
)
