"""Shared pieces of the patch-grid family cases (`tests/support/families/cases_qwen.py`, `cases_text_positions.py`): prompts
whose images and videos are flattened patches, `(total_patches, channels * temporal_patch * patch**2)`, with one
`(t, h, w)` grid row per image or video, as the families' processors return them.

The towers of `vlmprep.testing.configs.patch_grid` read 4 px patches, 2 frames per temporal patch, and merge 2x2
patches into one token: an item of grid `(t, h, w)` has `t * h * w / 4` placeholders (the processors' arithmetic,
never the drop-in's).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from support.segments import with_seeds
from vlmprep.testing import IMAGE, VIDEO
from vlmprep.testing.configs.patch_grid import MERGE_SIZE, PATCH_SIZE, TEMPORAL_PATCH_SIZE

PATCH_DIM = 3 * TEMPORAL_PATCH_SIZE * PATCH_SIZE**2
# Grid `(t, h, w)` in patches of an image: 16x16, 8x16, 16x24, 24x8 px (each family picks one from the seed).
IMAGE_GRIDS = [(1, 4, 4), (1, 2, 4), (1, 4, 6), (1, 6, 2)]
# Grid of the video drawn with seed `s`: `VIDEO_GRIDS[s % 2]`, 2 temporal patches (4 frames) of 16x16 or 8x16 px.
VIDEO_GRIDS = [(2, 4, 4), (2, 2, 4)]


def merged_tokens(grid: tuple[int, int, int]) -> int:
    """Placeholders of a run of `grid` patches: one per 2x2 merged patches."""
    t, h, w = grid
    return t * h * w // MERGE_SIZE**2


def patches(rows: int, seed: int, patch_shape: tuple[int, ...] = (PATCH_DIM,)) -> torch.Tensor:
    return torch.randn(rows, *patch_shape, generator=torch.Generator().manual_seed(seed))


def grid_prompt(
    segments: list,
    image_seeds: list[int],
    image_grid: Callable[[int], tuple[int, int, int]],
    placeholder: Callable[[str, tuple[int, int, int]], tuple[list[int], list[int]]],
    patch_shape: tuple[int, ...] = (PATCH_DIM,),
) -> tuple[list[int], list[int], dict[str, torch.Tensor], list[int]]:
    """A prompt's ids and token types (0 text, 1 image, 2 video), its pixel inputs, and its videos' seeds.

    Args:
        segments: lists of text ids, `IMAGE` or `VIDEO`; images and videos take the seeds of `image_seeds` in order.
        image_grid: the grid of the image drawn with a seed (a video's is `VIDEO_GRIDS[seed % 2]`).
        placeholder: `(IMAGE or VIDEO, grid) -> (ids, token types)`, as the family's processor writes an item.
        patch_shape: the shape of one patch row (flattened, by default; PaddleOCR-VL's are `(3, patch, patch)`).

    Returns:
        The ids, the token types, `pixel_values`/`image_grid_thw` and `pixel_values_videos`/`video_grid_thw` (where the
        prompt has images or videos), and the seeds of the videos.
    """
    ids: list[int] = []
    types: list[int] = []
    items: dict[str, list] = {IMAGE: [], VIDEO: []}
    for segment, seed in with_seeds(segments, image_seeds):
        if seed is None:
            ids += segment
            types += [0] * len(segment)
            continue
        grid = image_grid(seed) if segment is IMAGE else VIDEO_GRIDS[seed % len(VIDEO_GRIDS)]
        items[segment].append((grid, seed))
        segment_ids, segment_types = placeholder(segment, grid)
        ids += segment_ids
        types += segment_types
    pixel_inputs = {}
    for (pixel_key, grid_key), medium in (
        (("pixel_values", "image_grid_thw"), IMAGE),
        (("pixel_values_videos", "video_grid_thw"), VIDEO),
    ):
        if items[medium]:
            rows = [patches(t * h * w, seed, patch_shape) for (t, h, w), seed in items[medium]]
            pixel_inputs[pixel_key] = torch.cat(rows)  # (total_patches, *patch_shape)
            pixel_inputs[grid_key] = torch.tensor([grid for grid, _ in items[medium]])
    return ids, types, pixel_inputs, [seed for _, seed in items[VIDEO]]
