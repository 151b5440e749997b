"""Muse Glimmer: a tiny config, and prompts and pixel inputs as `MuseGlimmerProcessor` builds them.

Images are flattened patches, `(total_patches, patch_temporal * 3 * patch_size**2)`, with one `(t, h, w)` grid row
per image, each image one run of `t * h * w / merge_size**2` placeholders between `<|image_start|>` and
`<|image_end|>` (`MuseGlimmerProcessor.replace_image_token`). A video is `<|vid_start|>`, then per temporal patch its
timestamp text and one run of `h * w / merge_size**2` video placeholders, closed by `<|vid_frame_separator|>` or, after
the last, `<|vid_end|>` (`replace_video_token`). The processor returns no `mm_token_type_ids` unless asked.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, video placeholder 123, special tokens
110-121, text 3..99.
"""

from __future__ import annotations

import torch
import transformers

from family_registry import FamilyCase, register
from vlmprep.testing import IMAGE, TINY_IMAGE_TOKEN_ID, TINY_VOCAB_SIZE

VIDEO = "<video>"  # the video marker of tests/scenarios/test_image_sensitivity.py
VIDEO_TOKEN_ID = 123
IMAGE_START, IMAGE_END, VIDEO_START, VIDEO_FRAME_SEPARATOR, VIDEO_END = 110, 111, 112, 113, 114
PATCH_SIZE, PATCH_TEMPORAL, MERGE_SIZE = 4, 2, 2
PATCH_DIM = PATCH_TEMPORAL * 3 * PATCH_SIZE**2
# Grid `(t, h, w)` in patches of the image drawn with seed `s`: `IMAGE_GRIDS[s % 7 % 4]` (16x16, 8x16, 16x24, 24x8
# px); seed 7 has seed 0's grid (`test_image_already_in_cache_is_not_encoded` measures turn 1 with seed 0).
IMAGE_GRIDS = [(1, 4, 4), (1, 2, 4), (1, 4, 6), (1, 6, 2)]
# Grid of the video drawn with seed `s`: 2 temporal patches (4 frames) of 16x16 or 8x16 px.
VIDEO_GRIDS = [(2, 4, 4), (2, 2, 4)]


def tiny_muse_glimmer_config() -> transformers.MuseGlimmerConfig:
    # Two decoder layers: the first sliding-window with rope, the last full attention without rope (NoPE), as
    # upstream's default `layer_types` and `layer_rope_theta` make them; a window of 6 tokens so prompts exceed it.
    text = {
        "vocab_size": TINY_VOCAB_SIZE,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "sliding_window": 6,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    # Two vision layers: one windowed (a 16 px window: 4x4 patches of the position table), one full attention.
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "patch_size": PATCH_SIZE,
        "patch_temporal": PATCH_TEMPORAL,
        "merge_size": MERGE_SIZE,
        "pos_emb_height": 4,
        "pos_emb_width": 4,
        "max_position_embeddings": 16,
    }
    return transformers.MuseGlimmerConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=VIDEO_TOKEN_ID,
        out_hidden_size=32 * MERGE_SIZE**2,  # the tower's width after its pixel shuffle
        projector_hidden_size=32,
    )


def image_placeholder(grid: tuple[int, int, int]) -> list[int]:
    t, h, w = grid
    return [IMAGE_START, *[TINY_IMAGE_TOKEN_ID] * (t * h * w // MERGE_SIZE**2), IMAGE_END]


def video_placeholder(grid: tuple[int, int, int]) -> list[int]:
    t, h, w = grid
    ids = [VIDEO_START]
    for index in range(t):  # the temporal patch's timestamp text, its run, then a separator (or the end)
        ids += [90 + index, *[VIDEO_TOKEN_ID] * (h * w // MERGE_SIZE**2)]
        ids.append(VIDEO_FRAME_SEPARATOR if index < t - 1 else VIDEO_END)
    return ids


def build_muse_glimmer_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    ids: list[int] = []
    images, videos = [], []
    seeds = iter(image_seeds)
    for segment in segments:
        if segment is IMAGE:
            seed = next(seeds)
            images.append((IMAGE_GRIDS[seed % 7 % 4], seed))
            ids += image_placeholder(images[-1][0])
        elif segment == VIDEO:
            seed = next(seeds)
            videos.append((VIDEO_GRIDS[seed % 2], seed))
            ids += video_placeholder(videos[-1][0])
        else:
            ids += list(segment)
    inputs = {"input_ids": torch.tensor([ids])}
    for (pixel_key, grid_key), items in (
        (("pixel_values", "image_grid_thw"), images),
        (("pixel_values_videos", "video_grid_thw"), videos),
    ):
        if items:
            rows = [
                torch.randn(t * h * w, PATCH_DIM, generator=torch.Generator().manual_seed(seed))
                for (t, h, w), seed in items
            ]
            inputs[pixel_key] = torch.cat(rows)  # (total_patches, patch_dim)
            inputs[grid_key] = torch.tensor([grid for grid, _ in items])
    return inputs


register(
    FamilyCase(
        "muse_glimmer",
        transformers.MuseGlimmerForConditionalGeneration,
        tiny_muse_glimmer_config,
        build_muse_glimmer_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"),
    )
)
