"""Cosmos3 Omni, Inkling (`inkling_mm_model`) and Nemotron-H Omni: prompts as their processors build them.

Cosmos3 Omni's processor writes Qwen3-VL's prompts: an image is one run of its merged grid between vision start and
end (`mm_token_type_ids` 1); a video one run per frame, each after its timestamp text (type 2).

Inkling's processor writes an image as `<|content_image|>` then one placeholder per patch (4 px squares, each repeated
in time to the tower's 2 frames: 4, 2, 6 or 3 patches by seed modulo 7 modulo 4), and an audio clip as
`<|content_audio_input|>` then one placeholder per real frame of its dMel levels (`INKLING_AUDIO_FRAMES` frames of 4
mel bins, of which 6, 5, 4 or 3 are real, same rule), padded at the end to the longest clip.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.patch_grid_inputs import IMAGE_GRIDS, grid_prompt, merged_tokens
from vlmprep.testing import (
    AUDIO,
    IMAGE,
    TINY_AUDIO_TOKEN_ID,
    TINY_BOA_TOKEN_ID,
    TINY_BOI_TOKEN_ID,
    TINY_IMAGE_TOKEN_ID,
    TINY_VIDEO_TOKEN_ID,
)
from vlmprep.testing.configs.omnic import (
    INKLING_MEL_BINS,
    INKLING_MEL_VOCAB,
    INKLING_PATCH_SIZE,
    INKLING_TEMPORAL_PATCH,
)
from vlmprep.testing.configs.patch_grid import MERGE_SIZE, VISION_END, VISION_START


def _qwen3_vl_item(medium: str, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    # `Cosmos3OmniProcessor` as Qwen3-VL's: an image one run; a video `<{time} seconds>` then each frame's run
    if medium == IMAGE:
        run = [TINY_IMAGE_TOKEN_ID] * merged_tokens(grid)
        return [VISION_START, *run, VISION_END], [0, *[1] * len(run), 0]
    t, h, w = grid
    frame_tokens = h * w // MERGE_SIZE**2
    ids, types = [], []
    for index in range(t):
        ids += [90 + index, VISION_START, *[TINY_VIDEO_TOKEN_ID] * frame_tokens, VISION_END]
        types += [0, 0, *[2] * frame_tokens, 0]
    return ids, types


def build_cosmos3_omni_inputs(config, segments: list, item_seeds: list[int]) -> dict:
    """`input_ids`, `mm_token_type_ids` and the pixel inputs with their grids; the image drawn with seed `s` has grid
    `IMAGE_GRIDS[s % 4]`."""
    ids, types, pixel_inputs, _ = grid_prompt(
        segments, item_seeds, lambda seed: IMAGE_GRIDS[seed % len(IMAGE_GRIDS)], _qwen3_vl_item
    )
    return {"input_ids": torch.tensor([ids]), "mm_token_type_ids": torch.tensor([types]), **pixel_inputs}


register(
    FamilyCase(
        "cosmos3_omni",
        build_cosmos3_omni_inputs,
        per_token_keys=("mm_token_type_ids",),
        pixel_keys=("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"),
    )
)


INKLING_PATCHES = (4, 2, 6, 3)  # patches of the image drawn with seed `s`: `INKLING_PATCHES[s % 7 % 4]`
INKLING_AUDIO_FRAMES = 6


def _inkling_patches(seed: int) -> torch.Tensor:
    # `(patches, 2, 4, 4, 3)`: normalized pixels, each patch repeated in time as the image processor does
    generator = torch.Generator().manual_seed(seed)
    count = INKLING_PATCHES[seed % 7 % len(INKLING_PATCHES)]
    pixels = torch.rand(count, 1, INKLING_PATCH_SIZE, INKLING_PATCH_SIZE, 3, generator=generator) * 2 - 1
    return pixels.expand(-1, INKLING_TEMPORAL_PATCH, -1, -1, -1).contiguous()


def _inkling_clip(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    # `(frames, mel_bins)` dMel levels and the mask of the real frames (the processor pads at the end)
    generator = torch.Generator().manual_seed(3000 + seed)
    levels = torch.randint(0, INKLING_MEL_VOCAB, (INKLING_AUDIO_FRAMES, INKLING_MEL_BINS), generator=generator)
    mask = torch.zeros(INKLING_AUDIO_FRAMES, dtype=torch.bool)
    mask[: INKLING_AUDIO_FRAMES - seed % 7 % 4] = True
    return levels, mask


def build_inkling_inputs(config, segments: list, item_seeds: list[int]) -> dict:
    """`input_ids`, `pixel_values` (every image's patches back to back) and the audio levels with their mask."""
    ids: list[int] = []
    patches, clips = [], []
    seeds = iter(item_seeds)
    for segment in segments:
        if isinstance(segment, list):
            ids += segment
        elif segment == AUDIO:
            levels, mask = _inkling_clip(next(seeds))
            clips.append((levels, mask))
            ids += [TINY_BOA_TOKEN_ID, *[TINY_AUDIO_TOKEN_ID] * int(mask.sum())]
        else:
            pixels = _inkling_patches(next(seeds))
            patches.append(pixels)
            ids += [TINY_BOI_TOKEN_ID, *[TINY_IMAGE_TOKEN_ID] * pixels.shape[0]]
    inputs = {"input_ids": torch.tensor([ids])}
    if patches:
        inputs["pixel_values"] = torch.cat(patches)
    if clips:
        inputs["audio_input_ids"] = torch.stack([clip[0] for clip in clips])
        inputs["audio_input_ids_mask"] = torch.stack([clip[1] for clip in clips])
    return inputs


# The scenarios that count encoded images count items, here patches; with left padding, Inkling's full-attention
# layers scale queries by the log of each token's place in the cache (padding included), so upstream's own logits of a
# padded row differ from that prompt's alone. tests/units/test_inkling_mm_model.py runs the same checks counting patches
# and against upstream's forward of the same padded batch.
_PATCHES_COUNTED = "counts encoded images, which are patches here: tests/units/test_inkling_mm_model.py counts patches"
_PADDING_MOVES_UPSTREAM = (
    "transformers' Inkling scales full-attention queries by the log of each token's place in the cache, padding "
    "included, so a left-padded row differs from its prompt alone upstream too; tests/units/test_inkling_mm_model.py "
    "checks padded batches against upstream's forward of the same batch"
)
register(
    FamilyCase(
        "inkling_mm_model",
        build_inkling_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "audio_input_ids", "audio_input_ids_mask"),
        skip={
            "generate_matches_transformers": _PATCHES_COUNTED,
            "new_image_next_to_cached_image_encodes_only_the_new_one": _PATCHES_COUNTED,
            "left_padded_batch_matches_solo_runs": _PADDING_MOVES_UPSTREAM,
            "chunked_batch_matches_unchunked_batch": _PADDING_MOVES_UPSTREAM,
        },
    )
)
