"""The families whose images and audio clips reach a hybrid decoder (layers that keep a state besides keys and values),
Inkling (`inkling_mm_model`) and Nemotron-H Omni: prompts as their processors build them.

Inkling's processor writes an image as `<|content_image|>` then one placeholder per patch (4 px squares, each repeated
in time to the tower's 2 frames: 4, 2, 6 or 3 patches by seed modulo 7 modulo 4), and an audio clip as
`<|content_audio_input|>` then one placeholder per real frame of its dMel levels (`INKLING_AUDIO_FRAMES` frames of 4
mel bins, of which 6, 5, 4 or 3 are real, same rule), padded at the end to the longest clip.

Nemotron-H Omni's processor writes an image as `<img>`, one placeholder per 2x2 pixel-shuffled patches of its grid
(`NEMOTRON_GRIDS`, by seed modulo 7 modulo 4), `</img>`, and an audio clip as `<so_start>`, its placeholders,
`<so_end>`: `subsampled(L // hop + 1)` of them for `L` samples, the mask marking `L // hop` real frames (Parakeet's
feature extractor; the features are zero past the mask), clips padded with zero frames to the longest.
"""

from __future__ import annotations

import torch

from support.audio_clips import add_clips, audio_run, padded_mask, real_length
from support.cases import FamilyCase, register
from support.segments import with_seeds
from vlmprep.testing import (
    AUDIO,
    TINY_BOI_TOKEN_ID,
    TINY_EOI_TOKEN_ID,
    TINY_IMAGE_TOKEN_ID,
)
from vlmprep.testing.configs.hybrid_audio import (
    INKLING_MEL_BINS,
    INKLING_MEL_VOCAB,
    INKLING_PATCH_SIZE,
    INKLING_TEMPORAL_PATCH,
    NEMOTRON_MEL_BINS,
    NEMOTRON_PATCH_SIZE,
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
    return levels, padded_mask(INKLING_AUDIO_FRAMES, real_length(INKLING_AUDIO_FRAMES, seed, step=1), torch.bool)


def build_inkling_inputs(config, segments: list, item_seeds: list[int]) -> dict:
    """`input_ids`, `pixel_values` (every image's patches back to back) and the audio levels with their mask."""
    ids: list[int] = []
    patches, clips = [], []
    for segment, seed in with_seeds(segments, item_seeds):
        if seed is None:
            ids += segment
        elif segment == AUDIO:
            levels, mask = _inkling_clip(seed)
            clips.append((levels, mask))
            ids += audio_run(int(mask.sum()), end=None)
        else:
            pixels = _inkling_patches(seed)
            patches.append(pixels)
            ids += [TINY_BOI_TOKEN_ID, *[TINY_IMAGE_TOKEN_ID] * pixels.shape[0]]
    inputs = {"input_ids": torch.tensor([ids])}
    if patches:
        inputs["pixel_values"] = torch.cat(patches)
    return add_clips(inputs, clips, "audio_input_ids", "audio_input_ids_mask")


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
        padding_moves_upstream=True,
    )
)


NEMOTRON_GRIDS = ((4, 4), (2, 4), (4, 2), (2, 2))  # (h, w) in 4 px patches: 4, 2, 2 and 1 placeholders
NEMOTRON_AUDIO_FRAMES = 20


def _subsampled(frames: int) -> int:
    # Two stride-2 convolutions of kernel 3 and padding 1 (the processor's `_estimate_audio_num_embeddings`)
    for _ in range(2):
        frames = (frames - 1) // 2 + 1
    return frames


def _nemotron_clip(seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    # `(frames, mel_bins)` features, zero past the mask of `L // hop` real frames, and the clip's placeholders
    generator = torch.Generator().manual_seed(4000 + seed)
    real = real_length(NEMOTRON_AUDIO_FRAMES - 1, seed, step=4)  # L // hop: 19, 15, 11 or 7
    mask = padded_mask(NEMOTRON_AUDIO_FRAMES, real, torch.bool)
    features = torch.randn(NEMOTRON_AUDIO_FRAMES, NEMOTRON_MEL_BINS, generator=generator) * mask[:, None]
    return features, mask, _subsampled(real + 1)


# transformers' `DynamicCache.crop` cannot roll back a mamba layer's convolution and SSM states.
_CROPPED_MAMBA_CACHE = (
    "the scenario builds its caches with `DynamicCache.crop`, which cannot roll back a mamba layer's convolution "
    "and SSM states, so its caches are wrong; resuming is checked through prefix-store snapshots and uncropped caches "
    "(tests/units/test_nemotron_h_omni.py, tests/units/test_prefix_cache_mamba.py)"
)
_UPSTREAM_BEAMS = (
    "transformers 5.24's `NemotronH_Omni_Reasoning_V3._expand_multimodal_outputs` repeats features image by image "
    "([A, A, A, B, B, B]) instead of copy by copy, so upstream's beams and num_return_sequences with two images in a "
    "prompt are wrong; every mode is checked against upstream on one-image prompts in tests/units/test_nemotron_h_omni.py"
)


def build_nemotron_h_omni_inputs(config, segments: list, item_seeds: list[int]) -> dict:
    """`input_ids`, the images' flattened patches with `image_grid_hw`, and the clips with their mask."""
    ids: list[int] = []
    patches, grids, clips = [], [], []
    for segment, seed in with_seeds(segments, item_seeds):
        if seed is None:
            ids += segment
        elif segment == AUDIO:
            features, mask, tokens = _nemotron_clip(seed)
            clips.append((features, mask))
            ids += audio_run(tokens)
        else:
            height, width = NEMOTRON_GRIDS[seed % 7 % len(NEMOTRON_GRIDS)]
            generator = torch.Generator().manual_seed(seed)
            patches.append(torch.rand(height * width, 3 * NEMOTRON_PATCH_SIZE**2, generator=generator) * 2 - 1)
            grids.append((height, width))
            ids += [TINY_BOI_TOKEN_ID, *[TINY_IMAGE_TOKEN_ID] * (height * width // 4), TINY_EOI_TOKEN_ID]
    inputs = {"input_ids": torch.tensor([ids])}
    if patches:
        inputs["pixel_values"] = torch.cat(patches)
        inputs["image_grid_hw"] = torch.tensor(grids)
    return add_clips(inputs, clips, "input_features", "input_features_mask")


register(
    FamilyCase(
        "nemotron_h_omni",
        build_nemotron_h_omni_inputs,
        unread_inputs=frozenset({"pixel_values_videos"}),
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_grid_hw", "input_features", "input_features_mask"),
        skip={
            "cached_prefix_of_every_length_with_chunks": _CROPPED_MAMBA_CACHE,
            "cache_cropped_inside_image": _CROPPED_MAMBA_CACHE,
            "generate_matches_transformers": _UPSTREAM_BEAMS,
        },
    )
)
