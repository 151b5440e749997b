"""Qwen2-VL, Qwen2.5-VL, Qwen3-VL(-MoE), Qwen3.5(-MoE), GLM-4V, GLM-4.5V (`glm4v_moe`), GLM-4.6V (`glm46v`), GLM-5-Next
(`glm5_next`), GLM-OCR, PaddleOCR-VL (images only), Cosmos3 Edge, Cohere Compass and ERNIE 4.5 VL MoE
(`moe_mm_token_type_ids` too): prompts as their processors build them, `mm_token_type_ids` 1 for images and 2 for
videos.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, video placeholder 123, special tokens
110-121, text 3..99. Images of one prompt have different grids (sizes), so their placeholder runs differ in length
(`patch_grid_inputs.py`). GLM-4.5V, GLM-4.6V and GLM-5-Next write prompts exactly as GLM-4V: frames of image placeholders inside
video start and end.
"""

from __future__ import annotations

import functools

import torch

from support.cases import FamilyCase, register
from support.patch_grid_inputs import IMAGE_GRIDS, grid_prompt, merged_tokens
from vlmprep.models.registry import FAMILY_SPECS
from vlmprep.testing import IMAGE, TINY_IMAGE_TOKEN_ID, TINY_VIDEO_TOKEN_ID
from vlmprep.testing.configs.patch_grid import (
    ERNIE_VIDEO_END,
    ERNIE_VIDEO_START,
    GLM_IMAGE_END,
    GLM_IMAGE_START,
    GLM_VIDEO_END,
    GLM_VIDEO_START,
    MERGE_SIZE,
    PATCH_SIZE,
    VISION_END,
    VISION_START,
)

GLM_TYPES = ("glm4v", "glm4v_moe", "glm46v", "glm5_next", "glm_ocr")
# Video frames as Qwen3-VL's: one run per frame, after the frame's timestamp, between vision start and end.
PER_FRAME_TYPES = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "cosmos3_edge", "cohere_compass", "qwen4_exp")
# Towers that read one frame per patch (the processors' `temporal_patch_size` 1): PaddleOCR-VL's patches are small
# images for its convolutional embedding, Cosmos3 Edge's flattened rows.
ONE_FRAME_PATCH_SHAPES = {
    "paddleocr_vl": (3, PATCH_SIZE, PATCH_SIZE),
    "cosmos3_edge": (3 * PATCH_SIZE**2,),
    "ernie4_5_vl_moe": (3 * PATCH_SIZE**2,),
}


def image_placeholder(config, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    """The tokens (and token types) a processor puts for one image: its placeholder run between start and end."""
    start, end = (GLM_IMAGE_START, GLM_IMAGE_END) if config.model_type in GLM_TYPES else (VISION_START, VISION_END)
    run = [TINY_IMAGE_TOKEN_ID] * merged_tokens(grid)
    return [start, *run, end], [0, *[1] * len(run), 0]


def video_placeholder(config, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    """The tokens (and token types) for one video: one run for the whole video (Qwen2-VL, Qwen2.5-VL), or one per
    frame after its timestamp (Qwen3-VL), or GLM-4V's frames of image placeholders inside video start and end."""
    t, h, w = grid
    frame_tokens = h * w // MERGE_SIZE**2
    if config.model_type in GLM_TYPES:
        ids, types = [GLM_VIDEO_START], [0]
        for index in range(t):  # `<|begin_of_image|>` frame `<|end_of_image|>` then the frame's time in seconds
            ids += [GLM_IMAGE_START, *[TINY_IMAGE_TOKEN_ID] * frame_tokens, GLM_IMAGE_END, 90 + index]
            types += [0, *[2] * frame_tokens, 0, 0]
        return [*ids, GLM_VIDEO_END], [*types, 0]
    if config.model_type in PER_FRAME_TYPES:
        ids, types = [], []
        for index in range(t):  # `<{time} seconds>` then the frame
            ids += [90 + index, VISION_START, *[TINY_VIDEO_TOKEN_ID] * frame_tokens, VISION_END]
            types += [0, 0, *[2] * frame_tokens, 0]
        return ids, types
    if config.model_type == "ernie4_5_vl_moe":  # its resampler also merges pairs of frames
        run = [TINY_VIDEO_TOKEN_ID] * (merged_tokens(grid) // config.vision_config.temporal_merge_size)
        return [ERNIE_VIDEO_START, *run, ERNIE_VIDEO_END], [0, *[2] * len(run), 0]
    run = [TINY_VIDEO_TOKEN_ID] * merged_tokens(grid)
    return [VISION_START, *run, VISION_END], [0, *[2] * len(run), 0]


def placeholder(config, medium: str, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    return (image_placeholder if medium is IMAGE else video_placeholder)(config, grid)


def build_qwen_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """`input_ids`, `mm_token_type_ids` and the pixel inputs with their grids, as the processors return them; the
    image drawn with seed `s` has grid `IMAGE_GRIDS[s % 4]`."""
    ids, types, pixel_inputs, video_seeds = grid_prompt(
        segments,
        image_seeds,
        lambda seed: IMAGE_GRIDS[seed % len(IMAGE_GRIDS)],
        functools.partial(placeholder, config),
        *[ONE_FRAME_PATCH_SHAPES[config.model_type]] if config.model_type in ONE_FRAME_PATCH_SHAPES else [],
    )
    inputs = {"input_ids": torch.tensor([ids]), "mm_token_type_ids": torch.tensor([types]), **pixel_inputs}
    if config.model_type == "ernie4_5_vl_moe":
        inputs["moe_mm_token_type_ids"] = ernie_moe_token_types(config, inputs["input_ids"])
    if video_seeds and config.model_type == "qwen2_5_vl":
        inputs["second_per_grid_ts"] = torch.tensor([1.0 + (seed % 2) for seed in video_seeds])
    return inputs


def ernie_moe_token_types(config, input_ids: torch.Tensor) -> torch.Tensor:
    """`Ernie4_5_VLMoeProcessor.create_moe_mm_token_type_ids`: image placeholders and the image start and end tokens
    1, video ones 2 (the decoder routes them to its vision experts), text 0."""
    types = torch.zeros_like(input_ids)
    for value, ids in (
        (1, (config.image_token_id, config.image_start_token_id, config.image_end_token_id)),
        (2, (config.video_token_id, config.video_start_token_id, config.video_end_token_id)),
    ):
        types[torch.isin(input_ids, torch.tensor(ids))] = value
    return types


# GLM-5-Next's 1D-position forward takes both in one prompt.
GLM_MROPE_TYPES = ("glm4v", "glm4v_moe", "glm46v", "glm_ocr")
GLM_VIDEOS_APART = (
    "transformers' forward counts a video's frames (image placeholders) as image tokens against the images' features "
    "alone: a prompt with both fails upstream ('Image features and image tokens do not match')"
)


def upstream_beam_skips(model_type: str) -> dict[str, str]:
    """GLM-4V's upstream beam bug, which GLM-4.5V and GLM-4.6V copy (their other modes are checked against upstream in
    tests/scenarios/test_generate.py, and vlmprep's beams against uncached forwards)."""
    copied = "" if model_type == "glm4v" else " (copied from GLM-4V)"
    return {
        "generate_matches_transformers": (
            f"transformers 5.24's `{FAMILY_SPECS[model_type].class_name}._expand_multimodal_outputs`{copied} repeats "
            "features image by image ([A, A, A, B, B, B]) instead of copy by copy, so upstream's beams and "
            "num_return_sequences with two images in a prompt are wrong; greedy and sampling parity and exact beams "
            "are checked in tests/scenarios/test_generate.py"
        ),
    }


# The samples of families these cases stand in (`FamilyCase.samples`)
SAMPLES = {
    "qwen2_vl": ("chat", "mainstream", "rope_continuation", "pixel_checks", "attention_implementations"),
    "qwen2_5_vl": ("rope_continuation",),
    "qwen3_vl": ("rope_continuation",),
    "qwen3_5": ("state_snapshots",),
    "glm4v": ("bad_patch_input",),
    # Its sparse indexer can turn the kernels' rounding into another selection of keys
    "glm5_next": ("attention_implementations",),
}

for name in (
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "qwen3_vl_moe",
    "qwen3_5",
    "qwen3_5_moe",
    "cosmos3_edge",
    "cohere_compass",
    *GLM_TYPES,
):
    register(
        FamilyCase(
            name,
            build_qwen_inputs,
            per_token_keys=("mm_token_type_ids",),
            pixel_keys=(
                "pixel_values",
                "image_grid_thw",
                "pixel_values_videos",
                "video_grid_thw",
                "second_per_grid_ts",
            ),
            skip=upstream_beam_skips(name) if name in GLM_TYPES else {},
            videos_apart_from_images=GLM_VIDEOS_APART if name in GLM_MROPE_TYPES else "",
            # transformers' GLM-5-Next sparse indexer picks a left-padded row's top-k key pools otherwise in a batch
            # with longer rows than alone (a dense top-k removes the difference): upstream's padded rows differ from
            # their prompts alone (up to ~7e-2 on the tiny model), the drop-in's equal upstream's on the same batch
            padding_moves_upstream=name == "glm5_next",
            samples=SAMPLES.get(name, ()),
        )
    )
register(
    FamilyCase(
        "ernie4_5_vl_moe",
        build_qwen_inputs,
        per_token_keys=("mm_token_type_ids", "moe_mm_token_type_ids"),
        pixel_keys=("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"),
        samples=("drafted_placeholder",),
    )
)
register(
    FamilyCase(
        "paddleocr_vl",
        build_qwen_inputs,
        per_token_keys=("mm_token_type_ids",),
        pixel_keys=("pixel_values", "image_grid_thw"),
    )
)


# Cosmos3 Omni's processor writes Qwen3-VL's prompts: an image is one run of its merged grid between vision start and
# end (`mm_token_type_ids` 1); a video one run per frame, each after its timestamp text (type 2).
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
