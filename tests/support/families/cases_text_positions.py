"""Patch-grid families with 1D positions: Muse Glimmer, EXAONE 4.5, HyperCLOVAX-Vision v2, LFM3-VL, Kimi K2.5,
LLaVA-OneVision-1.5 and Ovis2.5, prompts and pixel inputs as their processors build them.

Images are flattened patches with one `(t, h, w)` grid row per image (`patch_grid_inputs.py`), each image one run of
`t * h * w / merge_size**2` placeholders between the vision start and end tokens (`<|image_start|>` and
`<|image_end|>` in `MuseGlimmerProcessor.replace_image_token`; `Exaone4_5_Processor.replace_image_token` and the chat
template write EXAONE 4.5's, HyperCLOVAX's and LFM3-VL's the same way). A Muse Glimmer video is `<|vid_start|>`, then
per temporal patch its timestamp text and one run of `h * w / merge_size**2` video placeholders, closed by
`<|vid_frame_separator|>` or, after the last, `<|vid_end|>` (`replace_video_token`). An EXAONE 4.5 or HyperCLOVAX
video is one run of `t * h * w / merge_size**2` video placeholders (`replace_video_token`), here between the vision
start and end tokens as an image; an LFM3-VL video, per temporal patch, its timestamp text and one run of
`h * w / merge_size**2` between the vision start and end tokens.
LLaVA-OneVision-1.5 writes EXAONE 4.5's items (Qwen2-VL's processor), its rows one frame per patch; an Ovis2.5 image
or video is one run between its own start and end tokens (`Ovis2_5Processor.replace_image_token`/
`replace_video_token`). The processors return no `mm_token_type_ids` unless asked.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, video placeholder 123, special tokens
110-121, text 3..99.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from support.cases import FamilyCase, register
from support.patch_grid_inputs import IMAGE_GRIDS, grid_prompt, merged_tokens
from vlmprep.testing import IMAGE, TINY_IMAGE_TOKEN_ID, TINY_VIDEO_TOKEN_ID
from vlmprep.testing.configs.indicators import OVIS2_5_VIDEO_END, OVIS2_5_VIDEO_START
from vlmprep.testing.configs.patch_grid import MERGE_SIZE, PATCH_SIZE, VISION_END, VISION_START

VIDEO_START, VIDEO_FRAME_SEPARATOR, VIDEO_END = 112, 113, 114


def image_grid(seed: int) -> tuple[int, int, int]:
    """`IMAGE_GRIDS[seed % 7 % 4]`: seed 7 has seed 0's grid (`test_image_already_in_cache_is_not_encoded` measures
    turn 1 with seed 0)."""
    return IMAGE_GRIDS[seed % 7 % len(IMAGE_GRIDS)]


def placeholder(medium: str, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    """An image's or a video's tokens (their token types, which the processor does not return, all 0)."""
    if medium is IMAGE:
        ids = [VISION_START, *[TINY_IMAGE_TOKEN_ID] * merged_tokens(grid), VISION_END]
        return ids, [0] * len(ids)
    t, h, w = grid
    ids = [VIDEO_START]
    for index in range(t):  # the temporal patch's timestamp text, its run, then a separator (or the end)
        ids += [90 + index, *[TINY_VIDEO_TOKEN_ID] * (h * w // MERGE_SIZE**2)]
        ids.append(VIDEO_FRAME_SEPARATOR if index < t - 1 else VIDEO_END)
    return ids, [0] * len(ids)


def run_placeholder(medium: str, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    """EXAONE 4.5's and HyperCLOVAX's items: a video is one run of `t * h * w / merge_size**2` video placeholders
    (`replace_video_token`), here between the vision start and end tokens as an image."""
    if medium is IMAGE:
        return placeholder(medium, grid)
    ids = [VISION_START, *[TINY_VIDEO_TOKEN_ID] * merged_tokens(grid), VISION_END]
    return ids, [0] * len(ids)


def per_frame_placeholder(medium: str, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    """LFM3-VL's items: a video is, per temporal patch, its timestamp text, then one run of `h * w / merge_size**2`
    video placeholders between the vision start and end tokens (`Lfm3VlProcessor.replace_video_token`)."""
    if medium is IMAGE:
        return placeholder(medium, grid)
    t, h, w = grid
    ids = []
    for index in range(t):
        ids += [90 + index, VISION_START, *[TINY_VIDEO_TOKEN_ID] * (h * w // MERGE_SIZE**2), VISION_END]
    return ids, [0] * len(ids)


def ovis2_5_placeholder(medium: str, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    """Ovis2.5's items: one run of `t * h * w / merge_size**2` placeholders between the image's (the video's) start
    and end tokens."""
    if medium is IMAGE:
        return placeholder(medium, grid)
    ids = [OVIS2_5_VIDEO_START, *[TINY_VIDEO_TOKEN_ID] * merged_tokens(grid), OVIS2_5_VIDEO_END]
    return ids, [0] * len(ids)


def text_positions_builder(item_placeholder: Callable, patch_shape: tuple[int, ...] | None = None) -> Callable:
    """A case's `build_inputs`: the ids, each item as `item_placeholder` writes it, and the pixel inputs (patch rows
    of `patch_shape`, by default the towers' 2 frames per patch)."""
    shape = {} if patch_shape is None else {"patch_shape": patch_shape}

    def build_inputs(config, segments: list, image_seeds: list[int]) -> dict:
        ids, _, pixel_inputs, _ = grid_prompt(segments, image_seeds, image_grid, item_placeholder, **shape)
        return {"input_ids": torch.tensor([ids]), **pixel_inputs}

    return build_inputs


PATCH_GRID_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw")
for name, item_placeholder in (
    ("muse_glimmer", placeholder),
    ("exaone4_5", run_placeholder),
    ("hyperclovax_vision_v2", run_placeholder),
    ("lfm3_vl", per_frame_placeholder),
):
    register(
        FamilyCase(
            name,
            text_positions_builder(item_placeholder),
            per_token_keys=(),
            pixel_keys=PATCH_GRID_KEYS,
            samples=("all_zero_mask_row",) if name == "exaone4_5" else (),
        )
    )
# transformers 5.25's types (`register` leaves them out under an older one). Both towers read one frame per patch.
ONE_FRAME_PATCH_SHAPE = (3 * PATCH_SIZE**2,)
register(
    FamilyCase(
        "llava_onevision1_5",
        text_positions_builder(run_placeholder, ONE_FRAME_PATCH_SHAPE),
        unread_inputs=frozenset({"second_per_grid_ts"}),
        per_token_keys=(),
        pixel_keys=PATCH_GRID_KEYS,
    )
)
# transformers' Ovis2.5 forward refuses a prompt cut inside an item (it counts the item's start and end tokens against
# the items it feeds), so the scenario's reference cache cannot be built; a cache cut inside one is rolled back in
# `cache_cropped_inside_image`, and a stored prefix ending there in `tests/units/test_ovis2_5.py`.
OVIS2_5_SKIP = {
    "cache_from_prompt_truncated_inside_image": (
        "transformers' forward refuses a prompt cut inside an item (it counts each item's start and end tokens "
        "against the items fed), so no caller can build such a cache; a cache cut inside one is rolled back "
        "(`cache_cropped_inside_image`)"
    )
}
register(
    FamilyCase(
        "ovis2_5",
        text_positions_builder(ovis2_5_placeholder, ONE_FRAME_PATCH_SHAPE),
        per_token_keys=(),
        pixel_keys=PATCH_GRID_KEYS,
        skip=OVIS2_5_SKIP,
    )
)
# Kimi K2.5's media markers: an image is `<|media_begin|>image<|media_content|>` + run + `<|media_end|>` (its chat
# template), a video chunk `HH:MM:SS.mmm<|media_begin|>video<|media_content|>` + run + `<|media_end|>`
# (`Kimi_K25Processor.replace_video_token`), its run `h * w / 4` placeholders: the tower pools the chunk's frames.
KIMI_MEDIA_BEGIN, KIMI_MEDIA_CONTENT, KIMI_MEDIA_END = 115, 116, 117
KIMI_PATCH_SHAPE = (3, PATCH_SIZE, PATCH_SIZE)  # one RGB patch image per row


def kimi_placeholder(medium: str, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    _, h, w = grid
    if medium is IMAGE:
        head = [KIMI_MEDIA_BEGIN, 40, KIMI_MEDIA_CONTENT]  # 40: the word "image"
        ids = [*head, *[TINY_IMAGE_TOKEN_ID] * (h * w // MERGE_SIZE**2), KIMI_MEDIA_END]
    else:
        head = [90, KIMI_MEDIA_BEGIN, 41, KIMI_MEDIA_CONTENT]  # the chunk's timestamp, then the word "video"
        ids = [*head, *[TINY_VIDEO_TOKEN_ID] * (h * w // MERGE_SIZE**2), KIMI_MEDIA_END]
    return ids, [0] * len(ids)


def build_kimi_k25_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    ids, _, pixel_inputs, _ = grid_prompt(segments, image_seeds, image_grid, kimi_placeholder, KIMI_PATCH_SHAPE)
    return {"input_ids": torch.tensor([ids]), **pixel_inputs}


register(FamilyCase("kimi_k25", build_kimi_k25_inputs, per_token_keys=(), pixel_keys=PATCH_GRID_KEYS))
