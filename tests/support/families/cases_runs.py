"""Families whose image is several placeholder runs: MiniCPM-V 4.6 and MiniCPM-o OCR (a global view, then one run per
slice; every view NaViT-packed into one `pixel_values` with a `target_sizes` row).

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
Placeholder counts follow the processor's arithmetic (`MiniCPMV4_6Processor.replace_image_token`: a view's `h * w`
patches over 16 in the "16x" downsample mode, over 4 in "4x"), never the drop-in under test.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import (
    global_and_local_views,
    pixels,
    prompt_ids,
    size_of,
    square_pixels,
    tiles_of,
)
from support.segments import with_seeds
from vlmprep.testing import IMAGE, VIDEO

# MiniCPM's `<image>`, `</image>`, `<slice>`, `</slice>`, `<image_id>`, `</image_id>`; a line break between slice rows.
MINICPM_IMAGE_START, MINICPM_IMAGE_END, MINICPM_SLICE_START, MINICPM_SLICE_END = 112, 113, 114, 115
MINICPM_ID_START, MINICPM_ID_END, MINICPM_LINE_BREAK = 116, 117, 9
# MiniCPM-V 4.7's processor returns `mm_token_type_ids` (its positions read them).
MODALITY_TYPED = ("minicpmv4_7",)
# The global view's patch grid drawn with a seed (`size_of`); an image with slices (`tiles_of(seed) == 3`) has a 2x1
# slice grid whose slices differ in size, as the processor's adaptive upsampling allows.
MINICPM_GLOBAL_SIZES = [(8, 8), (4, 8), (8, 4), (4, 4)]
MINICPM_SLICE_SIZES = [(8, 4), (4, 8)]


def minicpm_token_divisor(config) -> int:
    """The processor's `image_token_divisor`: 4 in the "4x" downsample mode (MiniCPM-o OCR's default), else 16."""
    return 4 if config.downsample_mode == "4x" else 16


def minicpm_views(config, seed: int) -> list[tuple[int, int]]:
    """The patch grids of an image's views: its global view, then its slices (row by row); halved a side in the "4x"
    mode, which merges 2x2 patches instead of 4x4, so that the views have the same placeholder counts."""
    slices = MINICPM_SLICE_SIZES if tiles_of(seed) > 1 else []
    views = [size_of(seed, MINICPM_GLOBAL_SIZES), *slices]
    return [(h // 2, w // 2) for h, w in views] if config.downsample_mode == "4x" else views


def minicpm_image_tokens(config, seed: int, local_index: int) -> list[int]:
    """`MiniCPMV4_6Processor`: `<image_id>i</image_id>`, the global view's run in `<image>...</image>`, then one
    `<slice>...</slice>` run per slice, a line break between slice rows (here one slice per row)."""
    divisor = minicpm_token_divisor(config)
    global_view, *slices = [[config.image_token_id] * (h * w // divisor) for h, w in minicpm_views(config, seed)]
    ids = [MINICPM_ID_START, 50 + local_index, MINICPM_ID_END, MINICPM_IMAGE_START, *global_view, MINICPM_IMAGE_END]
    for row, run in enumerate(slices):
        ids += [*([MINICPM_LINE_BREAK] if row else []), MINICPM_SLICE_START, *run, MINICPM_SLICE_END]
    return ids


def minicpm_video_tokens(config, seed: int, local_index: int) -> list[int]:
    """`MiniCPMV4_6Processor.replace_video_token` (video slicing off): per frame its view's run in
    `<image>...</image>` of video placeholders, after `<image_id>i</image_id>` (MiniCPM-V 4.7 numbers images only)."""
    divisor = minicpm_token_divisor(config)
    frames = [[config.video_token_id] * (h * w // divisor) for h, w in minicpm_frames(config, seed)]
    runs = [token for run in frames for token in (MINICPM_IMAGE_START, *run, MINICPM_IMAGE_END)]
    return runs if config.model_type in MODALITY_TYPED else [MINICPM_ID_START, 50 + local_index, MINICPM_ID_END, *runs]


def minicpm_frames(config, seed: int) -> list[tuple[int, int]]:
    """The patch grids of a video's frames: 2 frames of its global view's size."""
    return minicpm_views(config, seed)[:1] * 2


def _packed(config, seeds: list[int], views_of) -> torch.Tensor:
    # (1, 3, patch, total_patches * patch): every view's patches side by side (the processor's `reshape_by_patch`)
    patch = config.vision_config.patch_size
    views = [(seed, index, size) for seed in seeds for index, size in enumerate(views_of(config, seed))]
    return torch.cat([pixels((1, 3, patch, h * w * patch), seed * 10 + index) for seed, index, (h, w) in views], -1)


def build_minicpm_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """Ids with each image's and video's runs; `pixel_values` (`pixel_values_videos`) packed, with `target_sizes`
    (`target_sizes_videos`) `(views, 2)`. The seeds are the media's, in prompt order."""
    ids, images, videos = [], [], []
    for segment, seed in with_seeds(segments, image_seeds):
        if segment is IMAGE:
            images.append(seed)
            ids += minicpm_image_tokens(config, images[-1], len(images) - 1)
        elif segment is VIDEO:
            videos.append(seed)
            ids += minicpm_video_tokens(config, videos[-1], len(videos) - 1)
        else:
            ids += list(segment)
    inputs = {"input_ids": torch.tensor([ids])}
    if config.model_type in MODALITY_TYPED:
        inputs["mm_token_type_ids"] = modality_token_types(config, inputs["input_ids"])
    for key, sizes_key, seeds_of_kind, views_of in (
        ("pixel_values", "target_sizes", images, minicpm_views),
        ("pixel_values_videos", "target_sizes_videos", videos, minicpm_frames),
    ):
        if seeds_of_kind:
            inputs[key] = _packed(config, seeds_of_kind, views_of)
            sizes = [size for seed in seeds_of_kind for size in views_of(config, seed)]
            inputs[sizes_key] = torch.tensor(sizes, dtype=torch.int32)
    return inputs


def modality_token_types(config, input_ids: torch.Tensor) -> torch.Tensor:
    """The processor's `create_mm_token_type_ids`: image placeholders 1, video placeholders 2, every other token 0."""
    return (input_ids == config.image_token_id).long() + 2 * (input_ids == config.video_token_id).long()


for name in ("minicpmv4_6", "minicpm_ocr", "minicpmv4_7"):
    register(
        FamilyCase(
            name,
            build_minicpm_inputs,
            per_token_keys=("mm_token_type_ids",) if name in MODALITY_TYPED else (),
            pixel_keys=("pixel_values", "target_sizes", "pixel_values_videos", "target_sizes_videos"),
            # Canvas M-RoPE: upstream's `generate` numbers an answer after `</image>` unlike its forward
            upstream_decode_positions_differ=name == "minicpmv4_7",
        )
    )


# -- Step-3.7: a global view and local crops from two pixel inputs, one run per view -----------------------------------

# `<im_start>`, `<im_end>`, `<patch_start>`, `<patch_end>`, `<patch_newline>`
STEP_IM_START, STEP_IM_END, STEP_PATCH_START, STEP_PATCH_END, STEP_PATCH_NEWLINE = 112, 113, 114, 115, 116
STEP_GLOBAL_SIDE, STEP_CROP_SIDE = 32, 16
# The scenario doubles the views' size expecting a fixed-resolution tower; this tower interpolates its position
# embeddings and takes views of any size, with as many more placeholders: the refusal names the counts instead
# (`test_multi_run.py::test_global_and_local_views_refused_clearly`).
VIEWS_OF_ANY_SIZE = (
    "the tower takes views of any size (interpolated position embeddings) and a larger view needs more placeholders, "
    "so a prompt built for the processor's size is refused as a placeholder-count mismatch that names both counts"
)  # the image processor's `size` and crop (`patch_size`) sides, in pixels


def step_view_tokens(config, side: int) -> int:
    """The processor's feature size of a view: `(side // (vision patch * downsampler stride 4)) ** 2`, rounded up as
    the stride-2 convolutions round."""
    cells = side // config.vision_config.patch_size
    return (-(-cells // 4)) ** 2


def step_image_tokens(config, seed: int) -> list[int]:
    """`Step3p7Processor.replace_image_token`: per crop its run in `<patch_start>...<patch_end>` (a crop ending a row
    of the crop grid, but the last, followed by `<patch_newline>`), then the global view's in `<im_start>...<im_end>`.
    Seeds with `tiles_of(seed) == 3` have a 2x1 grid of crops, the others none."""
    crops = tiles_of(seed) - 1
    crop_run = [config.image_token_id] * step_view_tokens(config, STEP_CROP_SIDE)
    ids = []
    for row in range(crops):  # one crop per row
        ids += [STEP_PATCH_START, *crop_run, STEP_PATCH_END, *([STEP_PATCH_NEWLINE] if row < crops - 1 else [])]
    return [*ids, STEP_IM_START, *[config.image_token_id] * step_view_tokens(config, STEP_GLOBAL_SIDE), STEP_IM_END]


def build_step3p7_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """Ids with each image's runs; `pixel_values` `(images, 3, 32, 32)`, `pixel_values_local` `(crops, 3, 16, 16)`
    (when any image has crops) and `num_local_patches` `(images,)`."""
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [step_image_tokens(config, s) for s in image_seeds])])}
    if image_seeds:
        views, crops = global_and_local_views(
            image_seeds, square_pixels(STEP_GLOBAL_SIDE), square_pixels(STEP_CROP_SIDE)
        )
        inputs.update(views, num_local_patches=torch.tensor(crops))
    return inputs


register(
    FamilyCase(
        "step3p7",
        build_step3p7_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "pixel_values_local", "num_local_patches"),
        skip={"bad_input_wrong_resolution": VIEWS_OF_ANY_SIZE},
    )
)
