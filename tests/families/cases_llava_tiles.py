"""LLaVA-like families with one tile per item, the tiles of every image flattened in `pixel_values`: Aya Vision,
Cohere2 Vision, InternVL, GOT-OCR2 and LFM2-VL (SigLIP2 NaFlex rows).

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
Placeholder counts follow each processor's own arithmetic (called on a stand-in where the processor can be imported),
never the drop-in under test. Shared pieces (tiny configs, seeded images, prompts, batches): `llava_like_inputs.py`.
"""

from __future__ import annotations

import torch
import transformers

from family_registry import FamilyCase, register
from llava_like_inputs import (
    TINY_CLIP_8PX,
    TINY_QWEN2,
    TINY_SIGLIP_8PX,
    pixels,
    prompt_ids,
    size_of,
    tile_pixels,
    tiles_of,
)
from vlmprep.testing import TINY_IMAGE_TOKEN_ID

# -- Aya Vision -------------------------------------------------------------------------------------------------------

AYA_START, AYA_END, AYA_TILE, AYA_GLOBAL = 112, 113, 114, 115


def tiny_aya_vision_config() -> transformers.AyaVisionConfig:
    return transformers.AyaVisionConfig(
        text_config={
            **TINY_QWEN2,
            "model_type": "cohere2",
            "sliding_window": 6,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        vision_config={**TINY_SIGLIP_8PX, "image_size": 16},
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )


def aya_image_tokens(config, tiles: int) -> list[int]:
    """`AyaVisionProcessor.replace_image_token`: start, a marker and a placeholder run per tile (global last), end."""
    vision = config.vision_config
    run = [config.image_token_id] * (vision.image_size // vision.patch_size // config.downsample_factor) ** 2
    local = [token for _ in range(tiles - 1) for token in [AYA_TILE, *run]]
    return [AYA_START, *local, AYA_GLOBAL, *run, AYA_END]


def build_aya_vision_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    runs = [aya_image_tokens(config, tiles_of(seed)) for seed in image_seeds]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        inputs["pixel_values"] = tile_pixels(config, image_seeds)
    return inputs


register(
    FamilyCase(
        "aya_vision",
        transformers.AyaVisionForConditionalGeneration,
        tiny_aya_vision_config,
        build_aya_vision_inputs,
        per_token_keys=(),
    )
)


# -- InternVL ---------------------------------------------------------------------------------------------------------

INTERNVL_START, INTERNVL_END = 112, 113


def tiny_internvl_config() -> transformers.InternVLConfig:
    return transformers.InternVLConfig(
        text_config=dict(TINY_QWEN2),
        vision_config={
            "model_type": "internvl_vision",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 16,
            "patch_size": 4,
        },
        image_token_id=TINY_IMAGE_TOKEN_ID,
        image_seq_length=4,  # 4x4 patches, CLS dropped ("default"), pixel-shuffled by 0.5
    )


def build_internvl_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """`InternVLProcessor.replace_image_token`: `<img>`, `image_seq_length` placeholders per tile, `</img>`."""
    runs = [
        [INTERNVL_START, *[config.image_token_id] * (config.image_seq_length * tiles_of(seed)), INTERNVL_END]
        for seed in image_seeds
    ]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        inputs["pixel_values"] = tile_pixels(config, image_seeds)
    return inputs


register(
    FamilyCase(
        "internvl",
        transformers.InternVLForConditionalGeneration,
        tiny_internvl_config,
        build_internvl_inputs,
        per_token_keys=(),
    )
)


# -- GOT-OCR2: one run per image, `num_image_tokens` per tile ---------------------------------------------------------

GOT_IMG_START, GOT_IMG_END = 112, 113


def tiny_got_ocr2_config() -> transformers.GotOcr2Config:
    return transformers.GotOcr2Config(
        text_config=dict(TINY_QWEN2),
        vision_config={
            "hidden_size": 32,
            "output_channels": 16,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 16,
            "patch_size": 2,
            "window_size": 4,
            "global_attn_indexes": [1],
            "mlp_dim": 64,
        },
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )


def build_got_ocr2_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """`GotOcr2Processor`: `<img>`, `num_image_tokens` `<imgpad>` per tile (8x8 patches -> 4 tokens), `</img>`."""
    runs = [[GOT_IMG_START, *[config.image_token_id] * (4 * tiles_of(seed)), GOT_IMG_END] for seed in image_seeds]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        inputs["pixel_values"] = tile_pixels(config, image_seeds)
    return inputs


register(
    FamilyCase(
        "got_ocr2",
        transformers.GotOcr2ForConditionalGeneration,
        tiny_got_ocr2_config,
        build_got_ocr2_inputs,
        per_token_keys=(),
    )
)


# -- Cohere2 Vision: Aya Vision's tiles, each closed by a line break --------------------------------------------------

COHERE_LINE_BREAK = 116


def tiny_cohere2_vision_config() -> transformers.Cohere2VisionConfig:
    aya = tiny_aya_vision_config()
    return transformers.Cohere2VisionConfig(
        text_config=aya.text_config.to_dict(),
        vision_config=aya.vision_config.to_dict(),
        image_token_id=TINY_IMAGE_TOKEN_ID,
        alignment_intermediate_size=64,
    )


def build_cohere2_vision_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """`Cohere2VisionProcessor.replace_image_token`: start, per tile its placeholders and a line break, end."""
    vision = config.vision_config
    tile = [config.image_token_id] * (vision.image_size // vision.patch_size // config.downsample_factor) ** 2
    runs = [[AYA_START, *([*tile, COHERE_LINE_BREAK] * tiles_of(seed)), AYA_END] for seed in image_seeds]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        inputs["pixel_values"] = tile_pixels(config, image_seeds)
    return inputs


register(
    FamilyCase(
        "cohere2_vision",
        transformers.Cohere2VisionForConditionalGeneration,
        tiny_cohere2_vision_config,
        build_cohere2_vision_inputs,
        per_token_keys=(),
    )
)


# -- LFM2-VL: SigLIP2 NaFlex rows (tiles or whole images) of any patch grid -------------------------------------------

LFM2_START, LFM2_END, LFM2_TILE_TAG, LFM2_THUMBNAIL = 112, 113, 114, 115
# Patch grid (rows, columns) of the whole image / thumbnail drawn with a seed (see `size_of`); tiles are 4x4 patches.
NAFLEX_SHAPES = [(4, 4), (2, 4), (4, 2), (2, 2)]


def tiny_lfm2_vl_config() -> transformers.Lfm2VlConfig:
    return transformers.Lfm2VlConfig(
        text_config={**TINY_QWEN2, "model_type": "lfm2", "layer_types": ["conv", "full_attention"]},
        vision_config={
            **{key: value for key, value in TINY_CLIP_8PX.items() if key not in ("image_size", "projection_dim")},
            "model_type": "siglip2_vision_model",
            "num_patches": 16,
        },
        image_token_id=TINY_IMAGE_TOKEN_ID,
        projector_hidden_size=32,
    )


def build_lfm2_vl_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """`Lfm2VlProcessor` with its default special tokens: start, per tile a tag and its run, the thumbnail's tag and
    run (a single-tile image: just its run), end; one NaFlex row per tile, padded to the longest row."""
    factor, patch = config.downsample_factor, config.vision_config.patch_size
    runs, shapes = [], []
    for seed in image_seeds:
        tiles, thumbnail = tiles_of(seed), size_of(seed, NAFLEX_SHAPES)
        image_shapes = [(4, 4)] * (tiles - 1) + [thumbnail]
        run = [LFM2_START]
        for index, (rows, columns) in enumerate(image_shapes):
            if tiles > 1:
                run.append(LFM2_TILE_TAG if index < tiles - 1 else LFM2_THUMBNAIL)
            run += [config.image_token_id] * ((rows // factor) * (columns // factor))
        runs.append([*run, LFM2_END])
        shapes += image_shapes
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        most = config.vision_config.num_patches
        lengths = torch.tensor([rows * columns for rows, columns in shapes])
        mask = (torch.arange(most)[None] < lengths[:, None]).long()  # (rows, max_patches): real patches first
        values = torch.cat([pixels((tiles_of(seed), most, 3 * patch * patch), seed) for seed in image_seeds])
        inputs["pixel_values"] = values * mask[..., None]  # (rows, max_patches, C * patch * patch), padding 0
        inputs["spatial_shapes"] = torch.tensor(shapes)
        inputs["pixel_attention_mask"] = mask
    return inputs


register(
    FamilyCase(
        "lfm2_vl",
        transformers.Lfm2VlForConditionalGeneration,
        tiny_lfm2_vl_config,
        build_lfm2_vl_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "spatial_shapes", "pixel_attention_mask"),
    )
)
