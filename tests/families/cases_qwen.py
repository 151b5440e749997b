"""Qwen2-VL, Qwen2.5-VL, Qwen3-VL(-MoE) and GLM-4V: tiny configs, and prompts as their processors build them.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, video placeholder 123, special tokens
110-121, text 3..99. Pixel inputs are flattened patches, `(total_patches, channels * temporal_patch * patch**2)`,
with one `(t, h, w)` grid row per image or video. Images of one prompt have different grids (sizes), so their
placeholder runs differ in length; placeholder counts follow the processors' own arithmetic
(`t * h * w / merge_size**2`), never the drop-in under test.
"""

from __future__ import annotations

import torch
import transformers

from family_registry import FamilyCase, register
from vlmprep.testing import IMAGE, TINY_IMAGE_TOKEN_ID, TINY_VOCAB_SIZE

VIDEO = "<video>"  # marks where a video goes in a prompt (the conformance suite's prompts hold images only)
VIDEO_TOKEN_ID = 123
VISION_START = 110
VISION_END = 111
GLM_IMAGE_START, GLM_IMAGE_END, GLM_VIDEO_START, GLM_VIDEO_END = 112, 113, 114, 115
PATCH_SIZE = 4
TEMPORAL_PATCH_SIZE = 2
MERGE_SIZE = 2
PATCH_DIM = 3 * TEMPORAL_PATCH_SIZE * PATCH_SIZE**2
# Grid `(t, h, w)` in patches of the image drawn with seed `s`: `IMAGE_GRIDS[s % 4]` (16x16, 8x16, 16x24, 24x8 px).
IMAGE_GRIDS = [(1, 4, 4), (1, 2, 4), (1, 4, 6), (1, 6, 2)]
# Grid of the video drawn with seed `s`: 2 temporal patches (4 frames) of 16x16 or 8x16 px.
VIDEO_GRIDS = [(2, 4, 4), (2, 2, 4)]

TINY_TEXT = {
    "vocab_size": TINY_VOCAB_SIZE,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    # Stated, though Qwen2-VL derives it (hidden_size // heads): the conformance suite's bad-cache cases read it.
    "head_dim": 16,
    "max_position_embeddings": 1024,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
    # head_dim 16: 8 rotary frequencies, split over the (t, h, w) position rows
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
}
SPECIAL_TOKENS = {
    "image_token_id": TINY_IMAGE_TOKEN_ID,
    "video_token_id": VIDEO_TOKEN_ID,
    "vision_start_token_id": VISION_START,
    "vision_end_token_id": VISION_END,
}
TINY_VISION = {
    "depth": 1,
    "hidden_size": 32,
    "num_heads": 2,
    "in_channels": 3,
    "patch_size": PATCH_SIZE,
    "spatial_merge_size": MERGE_SIZE,
    "temporal_patch_size": TEMPORAL_PATCH_SIZE,
}


def tiny_qwen2_vl_config() -> transformers.Qwen2VLConfig:
    return transformers.Qwen2VLConfig(
        text_config=dict(TINY_TEXT),
        vision_config={**TINY_VISION, "embed_dim": 32, "mlp_ratio": 2},
        **SPECIAL_TOKENS,
    )


def tiny_qwen2_5_vl_config() -> transformers.Qwen2_5_VLConfig:
    # Two vision layers: one windowed, one full attention (`window_size` 16 px = one 2x2 merge window of patches).
    vision = {**TINY_VISION, "depth": 2, "intermediate_size": 64, "out_hidden_size": 32}
    vision.update(window_size=16, fullatt_block_indexes=[1], tokens_per_second=2)
    return transformers.Qwen2_5_VLConfig(text_config=dict(TINY_TEXT), vision_config=vision, **SPECIAL_TOKENS)


def tiny_qwen3_vl_config() -> transformers.Qwen3VLConfig:
    # Deepstack: the output of vision layer 0 is added to the hidden states of text layer 0 at the placeholders.
    vision = {**TINY_VISION, "depth": 2, "intermediate_size": 64, "out_hidden_size": 32}
    vision.update(num_position_embeddings=16, deepstack_visual_indexes=[0])
    text = {key: value for key, value in TINY_TEXT.items() if key != "pad_token_id"}
    text["rope_parameters"] = {**TINY_TEXT["rope_parameters"], "mrope_interleaved": True}
    config = transformers.Qwen3VLConfig(text_config=text, vision_config=vision, **SPECIAL_TOKENS)
    config.text_config.pad_token_id = 0
    return config


def tiny_qwen3_vl_moe_config() -> transformers.Qwen3VLMoeConfig:
    # Qwen3-VL's tiny vision tower on a decoder whose every layer routes to 2 of 4 experts.
    qwen3 = tiny_qwen3_vl_config()
    text = {key: value for key, value in TINY_TEXT.items() if key != "intermediate_size"}
    text["rope_parameters"] = qwen3.text_config.rope_parameters
    text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    return transformers.Qwen3VLMoeConfig(
        text_config=text, vision_config=qwen3.vision_config.to_dict(), **SPECIAL_TOKENS
    )


def tiny_glm4v_config() -> transformers.Glm4vConfig:
    vision = {**TINY_VISION, "depth": 2, "intermediate_size": 64, "out_hidden_size": 32, "image_size": 16}
    return transformers.Glm4vConfig(
        text_config=dict(TINY_TEXT),
        vision_config=vision,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=VIDEO_TOKEN_ID,  # never in prompts: video frames use the image placeholder
        image_start_token_id=GLM_IMAGE_START,
        image_end_token_id=GLM_IMAGE_END,
        video_start_token_id=GLM_VIDEO_START,
        video_end_token_id=GLM_VIDEO_END,
    )


def patches(rows: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, PATCH_DIM, generator=torch.Generator().manual_seed(seed))


def image_placeholder(config, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    """The tokens (and token types) a processor puts for one image: its placeholder run between start and end."""
    t, h, w = grid
    start, end = (GLM_IMAGE_START, GLM_IMAGE_END) if config.model_type == "glm4v" else (VISION_START, VISION_END)
    run = [TINY_IMAGE_TOKEN_ID] * (t * h * w // MERGE_SIZE**2)
    return [start, *run, end], [0, *[1] * len(run), 0]


def video_placeholder(config, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    """The tokens (and token types) for one video: one run for the whole video (Qwen2-VL, Qwen2.5-VL), or one per
    frame after its timestamp (Qwen3-VL), or GLM-4V's frames of image placeholders inside video start and end."""
    t, h, w = grid
    frame_tokens = h * w // MERGE_SIZE**2
    if config.model_type == "glm4v":
        ids, types = [GLM_VIDEO_START], [0]
        for index in range(t):  # `<|begin_of_image|>` frame `<|end_of_image|>` then the frame's time in seconds
            ids += [GLM_IMAGE_START, *[TINY_IMAGE_TOKEN_ID] * frame_tokens, GLM_IMAGE_END, 90 + index]
            types += [0, *[2] * frame_tokens, 0, 0]
        return [*ids, GLM_VIDEO_END], [*types, 0]
    if config.model_type.startswith("qwen3_vl"):
        ids, types = [], []
        for index in range(t):  # `<{time} seconds>` then the frame
            ids += [90 + index, VISION_START, *[VIDEO_TOKEN_ID] * frame_tokens, VISION_END]
            types += [0, 0, *[2] * frame_tokens, 0]
        return ids, types
    run = [VIDEO_TOKEN_ID] * (t * frame_tokens)
    return [VISION_START, *run, VISION_END], [0, *[2] * len(run), 0]


def build_qwen_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """`input_ids`, `mm_token_type_ids` and the pixel inputs with their grids, as the processors return them."""
    ids: list[int] = []
    types: list[int] = []
    images, videos = [], []
    seeds = iter(image_seeds)
    for segment in segments:
        if segment is IMAGE or segment == VIDEO:
            seed = next(seeds)
            grids, items, placeholder = (
                (IMAGE_GRIDS, images, image_placeholder)
                if segment is IMAGE
                else (VIDEO_GRIDS, videos, video_placeholder)
            )
            grid = grids[seed % len(grids)]
            items.append((grid, seed))
            segment_ids, segment_types = placeholder(config, grid)
        else:
            segment_ids, segment_types = list(segment), [0] * len(segment)
        ids += segment_ids
        types += segment_types
    inputs = {"input_ids": torch.tensor([ids]), "mm_token_type_ids": torch.tensor([types])}
    for (pixel_key, grid_key), items in (
        (("pixel_values", "image_grid_thw"), images),
        (("pixel_values_videos", "video_grid_thw"), videos),
    ):
        if items:
            inputs[pixel_key] = torch.cat([patches(t * h * w, seed) for (t, h, w), seed in items])
            inputs[grid_key] = torch.tensor([grid for grid, _ in items])
    if videos and config.model_type == "qwen2_5_vl":
        inputs["second_per_grid_ts"] = torch.tensor([1.0 + (seed % 2) for _, seed in videos])
    return inputs


PIXEL_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")
QWEN_SKIPS = {}

# Upstream's own beams and `num_return_sequences` are wrong for GLM-4V; the other modes are checked against it in
# tests/scenarios/test_generate.py, and vlmprep's beams against uncached forwards.
GLM4V_SKIPS = {
    "generate_matches_transformers": (
        "transformers 5.24's `Glm4vForConditionalGeneration._expand_multimodal_outputs` repeats features image by "
        "image ([A, A, A, B, B, B]) instead of copy by copy, so upstream's beams and num_return_sequences with two "
        "images in a prompt are off by ~1e-2; greedy and sampling parity and exact beams are checked in "
        "tests/scenarios/test_generate.py"
    ),
}

for name, upstream_class, make_config in (
    ("qwen2_vl", transformers.Qwen2VLForConditionalGeneration, tiny_qwen2_vl_config),
    ("qwen2_5_vl", transformers.Qwen2_5_VLForConditionalGeneration, tiny_qwen2_5_vl_config),
    ("qwen3_vl", transformers.Qwen3VLForConditionalGeneration, tiny_qwen3_vl_config),
    ("qwen3_vl_moe", transformers.Qwen3VLMoeForConditionalGeneration, tiny_qwen3_vl_moe_config),
    ("glm4v", transformers.Glm4vForConditionalGeneration, tiny_glm4v_config),
):
    register(
        FamilyCase(
            name,
            upstream_class,
            make_config,
            build_qwen_inputs,
            per_token_keys=("mm_token_type_ids",),
            pixel_keys=PIXEL_KEYS,
            skip={**QWEN_SKIPS, **(GLM4V_SKIPS if name == "glm4v" else {})},
        )
    )
