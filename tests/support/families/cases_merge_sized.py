"""VideoLLaMA3 (`layouts.merge_sized_grid`), prompts and pixel inputs as `VideoLlama3Processor` builds them.

Images are single-frame 4 px patches, `(total_patches, 3 * 4 * 4)`, with one `image_grid_thw` row and one
`image_merge_sizes` entry per image; an image is one run of `t * h * w / merge_size**2` placeholders (no start or end
tokens: `replace_image_token`). The merge size alternates 2 and 1 with the seed, so a prompt's images differ in it. A
video is, per frame, its timestamp text (`Time 0.0s:`) and a run of the frame's kept placeholders
(`replace_video_token`), with `video_merge_sizes` 2 and a `video_compression_mask` that drops some rows of every frame
after the first (`video_compression_masks`).

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, video placeholder 123, text 3..99.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.patch_grid_inputs import IMAGE_GRIDS, VIDEO_GRIDS, patches
from support.segments import with_seeds
from vlmprep.testing import IMAGE, TINY_IMAGE_TOKEN_ID, TINY_VIDEO_TOKEN_ID

PATCH_DIM = 3 * 4 * 4  # one RGB 4 px patch per row
VIDEO_MERGE_SIZE = 2


def image_item(seed: int) -> tuple[tuple[int, int, int], int]:
    """The grid and merge size of the image drawn with `seed` (seed 7 is seed 0's, as the other patch-grid cases)."""
    return IMAGE_GRIDS[seed % 7 % len(IMAGE_GRIDS)], 2 if seed % 7 % 2 == 0 else 1


def video_compression_mask(grid: tuple[int, int, int], seed: int) -> torch.Tensor:
    """Kept merged rows of a video: all of the first frame's, of each later frame all but one (drawn with `seed`)."""
    t, h, w = grid
    per_frame = h * w // VIDEO_MERGE_SIZE**2
    mask = torch.ones(t, per_frame, dtype=torch.bool)
    for frame in range(1, t):
        mask[frame, (seed + frame) % per_frame] = False
    return mask.flatten()


def build_video_llama_3_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    ids: list[int] = []
    images, videos = [], []
    for segment, seed in with_seeds(segments, image_seeds):
        if seed is None:
            ids += segment
            continue
        if segment is IMAGE:
            grid, merge_size = image_item(seed)
            images.append((grid, merge_size, seed))
            ids += [TINY_IMAGE_TOKEN_ID] * (grid[0] * grid[1] * grid[2] // merge_size**2)
            continue
        grid = VIDEO_GRIDS[seed % len(VIDEO_GRIDS)]
        mask = video_compression_mask(grid, seed)
        videos.append((grid, mask, seed))
        for frame, kept in enumerate(mask.reshape(grid[0], -1).sum(-1).tolist()):
            ids += [90 + frame, *[TINY_VIDEO_TOKEN_ID] * kept]  # the frame's timestamp text, then its kept rows
    inputs = {"input_ids": torch.tensor([ids])}
    if images:
        inputs["pixel_values"] = torch.cat([patches(t * h * w, seed, (PATCH_DIM,)) for (t, h, w), _, seed in images])
        inputs["image_grid_thw"] = torch.tensor([grid for grid, _, _ in images])
        inputs["image_merge_sizes"] = torch.tensor([merge_size for _, merge_size, _ in images])
    if videos:
        inputs["pixel_values_videos"] = torch.cat(
            [patches(t * h * w, seed, (PATCH_DIM,)) for (t, h, w), _, seed in videos]
        )
        inputs["video_grid_thw"] = torch.tensor([grid for grid, _, _ in videos])
        inputs["video_merge_sizes"] = torch.tensor([VIDEO_MERGE_SIZE] * len(videos))
        inputs["video_compression_mask"] = torch.cat([mask for _, mask, _ in videos])
    return inputs


register(
    FamilyCase(
        "video_llama_3",
        build_video_llama_3_inputs,
        per_token_keys=(),
        pixel_keys=(
            "pixel_values",
            "image_grid_thw",
            "image_merge_sizes",
            "pixel_values_videos",
            "video_grid_thw",
            "video_merge_sizes",
            "video_compression_mask",
        ),
    )
)
