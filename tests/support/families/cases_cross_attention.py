"""Families whose decoder cross-attends to the images: Llama 3.2 Vision (mllama), IDEFICS.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.

As `MllamaProcessor` builds them: one `<|image|>` token per image (leading image tokens go before the BOS token);
`pixel_values` `(1, images, max_tiles, C, H, W)` with zero tiles after an image's own, `aspect_ratio_ids` `(1, images)`
(1-based ids into the supported aspect ratios) and `aspect_ratio_mask` `(1, images, max_tiles)`; and
`cross_attention_mask` `(1, seq, images, max_tiles)`: each image's real tiles from its token up to the next image's
token (a group of consecutive image tokens all up to the group's end), the last image's up to the prompt's end.
An image's tile count follows its seed (`seed % 7 % 3`: 1x1, 1x2, 2x1), so seed 7 has seed 0's shape.

IDEFICS inputs follow `IdeficsProcessor.__call__` and its `image_attention_mask_for_packed_input_ids`.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import pixels, prompt_ids
from vlmprep.testing import IMAGE

_PADDING_SLOTS = (
    "rows with different image counts are refused: the processor pads them with empty image slots, whose states "
    "upstream computes and lets text before a row's first image attend to, so even upstream's batch differs from its "
    "rows alone"
)
_CROPPED_CACHE = (
    "a cross-attention layer caches image states, not per-token states: a cache cropped to a token count (the "
    "scenario's caller cache, `DynamicCache.crop`) cuts them, and the drop-in refuses it; caller caches of whole turns "
    "and the refusal: tests/units/test_mllama.py"
)


def _aspect_ratio_id(seed: int) -> int:
    return 1 + seed % 7 % 3  # 1: 1x1 (one tile), 2: 1x2, 3: 2x1 (two tiles)


def cross_attention_mask_of(input_ids: list[int], image_token_id: int, tiles: list[int], max_tiles: int):
    """`(1, seq, images, max_tiles)`, as `get_cross_attention_token_mask` and its dense conversion build it."""
    starts = [position for position, token in enumerate(input_ids) if token == image_token_id]
    ends = [*starts[1:], len(input_ids)]
    for index in reversed(range(len(starts) - 1)):  # consecutive image tokens attend together to the group's end
        if starts[index] == ends[index] - 1:
            ends[index] = ends[index + 1]
    mask = torch.zeros(1, len(input_ids), len(starts), max_tiles, dtype=torch.long)
    for index, (start, end) in enumerate(zip(starts, ends, strict=True)):
        mask[0, start:end, index, : tiles[index]] = 1
    return mask


def build_mllama_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    vision = config.vision_config
    ids = prompt_ids(segments, [[config.image_token_id]] * len(image_seeds))
    inputs = {"input_ids": torch.tensor([ids])}
    if not image_seeds:
        return inputs
    ratios = [_aspect_ratio_id(seed) for seed in image_seeds]
    tiles = [1 if ratio == 1 else 2 for ratio in ratios]
    size, max_tiles = vision.image_size, vision.max_num_tiles
    images = []
    for seed, count in zip(image_seeds, tiles, strict=True):
        image = torch.zeros(max_tiles, 3, size, size)
        image[:count] = pixels((count, 3, size, size), seed)
        images.append(image)
    inputs["pixel_values"] = torch.stack(images)[None]  # (1, images, max_tiles, C, H, W)
    inputs["aspect_ratio_ids"] = torch.tensor([ratios])
    inputs["aspect_ratio_mask"] = torch.tensor([[[1] * count + [0] * (max_tiles - count) for count in tiles]])
    inputs["cross_attention_mask"] = cross_attention_mask_of(ids, config.image_token_id, tiles, max_tiles)
    return inputs


register(
    FamilyCase(
        "mllama",
        build_mllama_inputs,
        per_token_keys=("cross_attention_mask",),
        per_token_axes={"cross_attention_mask": 1},
        pixel_keys=("pixel_values", "aspect_ratio_ids", "aspect_ratio_mask"),
        differential_refusals={
            "callers_cache": _CROPPED_CACHE,
            "uneven_item_counts": _PADDING_SLOTS,
            "assisted_decoding": (
                "a rejected draft cannot be cropped out of the cross-attention layers' image states "
                "(tests/units/test_mllama.py)"
            ),
        },
        skip={
            "left_padded_batch_matches_solo_runs": _PADDING_SLOTS,
            "chunked_batch_matches_unchunked_batch": _PADDING_SLOTS,
            "cached_prefix_of_every_length_with_chunks": _CROPPED_CACHE,
            "new_image_next_to_cached_image_encodes_only_the_new_one": (
                "text before the first image attends to every image's states alike, so a new image recomputes the "
                "prompt from its start with the cached image (its features from the encoder cache when this model "
                "encoded it: tests/units/test_mllama.py)"
            ),
            "bad_input_wrong_run_length": (
                "an image is one `<|image|>` token, not a run: a token fewer is an image without its token, refused "
                "by the image count check"
            ),
        },
    )
)


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
        per_token_axes={"image_attention_mask": 1},
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
