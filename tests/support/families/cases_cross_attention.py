"""Families whose images reach the decoder through cross-attention rather than placeholder rows: IDEFICS.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
Inputs follow `IdeficsProcessor.__call__` and its `image_attention_mask_for_packed_input_ids`.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import pixels
from vlmprep.testing import IMAGE

FAKE_AROUND_IMAGE = 112


def idefics_ids(config, segments: list) -> list[int]:
    """`IdeficsProcessor.__call__`'s `image_tokens`: `<fake><image><fake>`, an image right after another one only
    `<image><fake>` (they share the fake token between them)."""
    ids: list[int] = []
    last_was_image = False
    for segment in segments:
        if segment is IMAGE:
            ids += (
                [config.image_token_id, FAKE_AROUND_IMAGE]
                if last_was_image
                else [FAKE_AROUND_IMAGE, config.image_token_id, FAKE_AROUND_IMAGE]
            )
            last_was_image = True
        else:
            ids += list(segment)
            last_was_image = last_was_image and not segment
    return ids


def idefics_image_attention_mask(input_ids: torch.Tensor, image_token_id: int, eos_token_id: int, images: int):
    """`image_attention_mask_for_packed_input_ids`, one-hot: each token sees the latest image at or before it, and
    none after an end of sequence until the next image."""
    mask = torch.zeros(*input_ids.shape, images, dtype=torch.long)  # (batch, seq, images)
    for row in range(input_ids.shape[0]):
        count, seen_eos = -1, False
        for position, token in enumerate(input_ids[row].tolist()):
            if token == image_token_id:
                count, seen_eos = count + 1, False
            if count >= 0 and not seen_eos:
                mask[row, position, count] = 1
            seen_eos = seen_eos or token == eos_token_id
    return mask


def build_idefics_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    input_ids = torch.tensor([idefics_ids(config, segments)])
    inputs = {"input_ids": input_ids}
    if image_seeds:
        size = config.vision_config.image_size
        inputs["pixel_values"] = torch.stack([pixels((3, size, size), seed) for seed in image_seeds]).unsqueeze(0)
        inputs["image_attention_mask"] = idefics_image_attention_mask(
            input_ids, config.image_token_id, config.eos_token_id, len(image_seeds)
        )
    return inputs


register(
    FamilyCase(
        "idefics",
        build_idefics_inputs,
        per_token_keys=("image_attention_mask",),
        pixel_keys=("pixel_values",),
        token_axis={"image_attention_mask": 1},
        answer_repeats_last=("image_attention_mask",),
        upstream_needs_items=True,
        # The cross-attention inputs: the engine runs no IDEFICS request (`continuous_batching_refusal`), so no
        # request carries them (the precomputed states are what the drop-in itself hands upstream's forward);
        # `interpolate_pos_encoding` is never read: images other than the tower's size are refused before encoding
        unread_inputs=frozenset(
            {"image_attention_mask", "image_encoder_embeddings", "perceiver_embeddings", "interpolate_pos_encoding"}
        ),
        skip={
            "cached_text_prefix_then_image_turn": (
                "transformers' IDEFICS forward needs image inputs even for text (the processor's all-zero image and "
                "its `image_attention_mask`); the scenario builds its cache from ids alone (a text-only call: "
                "tests/units/test_idefics.py)"
            ),
            "cache_from_prompt_truncated_inside_image": (
                "an image is one `<image>` token, with nothing inside it to cut (and the scenario's cache is built "
                "from features placed at placeholders, which IDEFICS's forward does not read)"
            ),
            "bad_input_wrong_run_length": (
                "an image is one `<image>` token: a run one placeholder short is no run, refused as an image-count "
                "mismatch (bad_input_too_many_images, bad_input_too_few_images)"
            ),
        },
    )
)
