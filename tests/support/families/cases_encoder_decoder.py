"""Encoder-decoder families, whose image placeholders are in the encoder's prompt: Florence-2 and T5Gemma 2.

- Florence-2: the processor writes the image's run first, then `<s>`, the task prompt and `</s>`
  (`Florence2Processor`: `image_token * num_image_tokens + bos + prompt + eos`); one image per prompt, all of one size.
- T5Gemma 2: Gemma3's processor: each image is `<start_of_image>`, `mm_tokens_per_image` placeholders, `<end_of_image>`.

The answer is the decoder's, not a continuation of the prompt: the scenarios that continue a prompt with a cache of it
(cached prefixes, chunked prefill of the prompt, the prefix cache) have no meaning here, and the drop-in refuses what
it cannot do (a prefix cache). tests/scenarios/test_encoder_decoder.py checks these families against transformers.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import prompt_ids
from vlmprep.testing import IMAGE, random_pixels

# A decoder-only scenario's premise, for the skips: the prompt is the decoder's, continued by the answer.
_PROMPT_IS_THE_ENCODERS = (
    "encoder-decoder: the prompt is the encoder's, encoded whole in every call (only the decoder has a KV cache), so "
    "there is no cached prompt prefix to resume from; the encoder cache serves its images "
    "(tests/scenarios/test_encoder_decoder.py)"
)
_CHUNKS = (
    "encoder-decoder: prefill chunks cut the decoder's prompt (one start token), not the encoder's, which is encoded "
    "whole; the encoder's items are checked in tests/scenarios/test_encoder_decoder.py"
)
_LEARNED_POSITIONS = (
    "BART's learned positions number a left-padded row from its padding, so transformers' own row differs from the "
    "row alone (by ~1e-2 on the tiny model); tests/scenarios/test_encoder_decoder.py checks a padded batch against "
    "transformers on the same batch"
)
_ONE_IMAGE = "Florence-2's processor writes one image per prompt, before the task text"
_CACHE_SCENARIOS = (
    "cached_text_prefix_then_image_turn",
    "image_already_in_cache_is_not_encoded",
    "new_image_next_to_cached_image_encodes_only_the_new_one",
    "cache_cropped_inside_image",
    "cache_from_prompt_truncated_inside_image",
    "interleaved_requests_share_no_state",
    "bad_input_cache_longer_than_prompt",
    "bad_input_cache_from_other_head_shape",
    "bad_input_cache_from_other_layer_count",
)
ENCODER_DECODER_SKIPS = {
    **dict.fromkeys(_CACHE_SCENARIOS, _PROMPT_IS_THE_ENCODERS),
    "every_chunk_size_is_exact": _CHUNKS,
    "cached_prefix_of_every_length_with_chunks": _CHUNKS,
    "chunked_batch_matches_unchunked_batch": _CHUNKS,
}

# The differential conversations go on in the encoder's next prompt (the answer, then more text and images); a cache
# is the decoder's, made for another encoder prompt
ENCODER_DECODER_REFUSALS = {
    "callers_cache": _PROMPT_IS_THE_ENCODERS,
    "returned_cache": _PROMPT_IS_THE_ENCODERS,
    "prefix_store": "refused: the decoder cross-attends to the whole encoder output (tests/scenarios/test_encoder_decoder.py)",
}


def build_florence2_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    count = _florence2_image_tokens(config)
    runs = [[config.image_token_id] * count for _ in image_seeds]
    text = config.text_config
    ids = prompt_ids(segments, runs)
    first_text = next((i for i, segment in enumerate(segments) if segment is not IMAGE), len(segments))
    images_first = sum(len(run) for run in runs[:first_text])  # the processor's image run(s) come before `<s>`
    ids = ids[:images_first] + [text.bos_token_id] + ids[images_first:] + [text.eos_token_id]
    inputs = {"input_ids": torch.tensor([ids])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(1, seed) for seed in image_seeds])
    return inputs


def _florence2_image_tokens(config) -> int:
    # The processor's `image_seq_length`: the last DaViT stage's grid cells of a 16 px image, plus the pooled feature
    side = 16
    vision = config.vision_config
    for kernel, stride, padding in zip(vision.patch_size, vision.patch_stride, vision.patch_padding, strict=True):
        side = (side + 2 * padding - kernel) // stride + 1
    return side * side + 1


def build_t5gemma2_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    encoder = config.encoder
    run = [encoder.boi_token_index, *[config.image_token_id] * encoder.mm_tokens_per_image, encoder.eoi_token_index]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [run] * len(image_seeds))])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(1, seed) for seed in image_seeds])
    return inputs


register(
    FamilyCase(
        "florence2",
        build_florence2_inputs,
        per_token_keys=(),
        padding_moves_upstream=True,  # BART's learned positions: `_LEARNED_POSITIONS`
        differential_refusals=ENCODER_DECODER_REFUSALS,
        skip={
            **ENCODER_DECODER_SKIPS,
            "generate_matches_transformers": f"{_ONE_IMAGE}; tests/scenarios/test_encoder_decoder.py checks generate",
            "repeated_item_in_one_call": _ONE_IMAGE,
            "left_padded_batch_matches_solo_runs": f"{_ONE_IMAGE}; {_LEARNED_POSITIONS}",
            "bad_input_too_many_images": f"{_ONE_IMAGE}: too many images is checked with one placeholder run",
            "bad_input_wrong_resolution": (
                "images of any size are taken (the placeholder count follows the last stage's grid): another size "
                "is refused as a run of the wrong length, as `bad_input_wrong_run_length` checks"
            ),
        },
    )
)
register(
    FamilyCase(
        "t5gemma2",
        build_t5gemma2_inputs,
        per_token_keys=(),
        differential_refusals=ENCODER_DECODER_REFUSALS,
        skip=dict(ENCODER_DECODER_SKIPS),
    )
)
