"""More placeholder-based families: tiny configs, and prompts and pixel inputs as each family's processor builds them.

- DeepSeek-VL: one SigLIP image per run, `(image_size / patch_size) ** 2` placeholders (the processor's
  `num_image_tokens`), `pixel_values` `(images, C, H, W)`;
- DeepSeek-VL-Hybrid: DeepSeek-VL's runs, plus a SAM copy of every image in `high_res_pixel_values`;
- Aria: one crop per item, crops flattened in `pixel_values` with their `pixel_mask`, an image's crops one run;
- EXAONE 4.5, HyperCLOVAX-Vision v2 and LFM3-VL: Qwen2-VL's flattened patches with one `(t, h, w)` grid row per image, the run between vision
  start and end tokens, 1D positions;
- Video-LLaVA (images): LLaVA's runs of CLIP patches (CLS dropped), `pixel_values` `(images, C, H, W)`;
- Qianfan-OCR: InternVL's layout, one tile per item (`image_seq_length` placeholders), tiles flattened in
  `pixel_values`, an image's tiles one run between `<img>` and `</img>`.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
"""

from __future__ import annotations

import torch
import transformers

from family_registry import FamilyCase, register
from vlmprep.testing import IMAGE, TINY_IMAGE_SIZE, TINY_IMAGE_TOKEN_ID, TINY_VOCAB_SIZE, random_pixels

TINY_LLAMA = {
    "model_type": "llama",
    "vocab_size": TINY_VOCAB_SIZE,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}
TINY_SIGLIP = {
    "model_type": "siglip_vision_model",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "image_size": TINY_IMAGE_SIZE,
    "patch_size": 4,
}


def tiles_of(seed: int) -> int:
    """Crops of the image drawn with `seed`: 3 for seeds 2, 6, 9, 13, ... (as in `llava_like_inputs.tiles_of`).

    Scenarios that count encoded images (`VisionRunCounter.images`, which counts crops) use seeds 0, 1, 3, 4, 5, 7
    and 8, so their images are single crops; the chunked batch (seed 2) and the interleaved requests (seed 13) have
    multi-crop images.
    """
    return 3 if seed % 7 in (2, 6) else 1


def prompt_ids(segments: list, image_token_runs: list[list[int]]) -> list[int]:
    """Text segments and images, each image replaced by its tokens (in order)."""
    ids: list[int] = []
    runs = iter(image_token_runs)
    for segment in segments:
        ids += next(runs) if segment is IMAGE else list(segment)
    return ids


# -- DeepSeek-VL ------------------------------------------------------------------------------------------------------


def tiny_deepseek_vl_config() -> transformers.DeepseekVLConfig:
    return transformers.DeepseekVLConfig(
        text_config=dict(TINY_LLAMA), vision_config=dict(TINY_SIGLIP), image_token_id=TINY_IMAGE_TOKEN_ID
    )


def build_deepseek_vl_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    vision = config.vision_config
    # `DeepseekVLProcessor` repeats the image token `num_image_tokens` times: the SigLIP patch count.
    run = [config.image_token_id] * (vision.image_size // vision.patch_size) ** 2
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [run] * len(image_seeds))])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(1, seed) for seed in image_seeds])
    return inputs


register(
    FamilyCase(
        "deepseek_vl",
        transformers.DeepseekVLForConditionalGeneration,
        tiny_deepseek_vl_config,
        build_deepseek_vl_inputs,
        per_token_keys=(),
    )
)


# -- DeepSeek-VL-Hybrid -----------------------------------------------------------------------------------------------

HIGH_RES_IMAGE_SIZE = 32


def tiny_deepseek_vl_hybrid_config() -> transformers.DeepseekVLHybridConfig:
    return transformers.DeepseekVLHybridConfig(
        text_config=dict(TINY_LLAMA),
        vision_config=dict(TINY_SIGLIP),
        high_res_vision_config={
            "model_type": "sam_vision_model",
            "hidden_size": 32,
            "output_channels": 8,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": HIGH_RES_IMAGE_SIZE,
            "patch_size": 4,
            "global_attn_indexes": [1],
            "window_size": 4,
            "mlp_dim": 64,
        },
        image_token_id=TINY_IMAGE_TOKEN_ID,
    )


def build_deepseek_vl_hybrid_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    inputs = build_deepseek_vl_inputs(config, segments, image_seeds)  # the processor writes the same runs
    if image_seeds:
        # The image processor resizes each image twice: SigLIP's size and SAM's (high-resolution) size.
        inputs["high_res_pixel_values"] = torch.cat(
            [random_pixels(1, seed + 1000, size=HIGH_RES_IMAGE_SIZE) for seed in image_seeds]
        )
    return inputs


register(
    FamilyCase(
        "deepseek_vl_hybrid",
        transformers.DeepseekVLHybridForConditionalGeneration,
        tiny_deepseek_vl_hybrid_config,
        build_deepseek_vl_hybrid_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "high_res_pixel_values"),
    )
)


# -- Aria -------------------------------------------------------------------------------------------------------------

# The processor's `size_conversion` for this tiny tower: a 16 px crop is (16 / 4) ** 2 = 16 patches -> 4 queries.
ARIA_PATCH_TO_QUERY = {16: 4}


def tiny_aria_config() -> transformers.AriaConfig:
    text = {key: value for key, value in TINY_LLAMA.items() if key != "model_type"}
    return transformers.AriaConfig(
        text_config={**text, "moe_num_experts": 2, "moe_topk": 1, "moe_num_shared_experts": 1},
        vision_config={**TINY_SIGLIP, "model_type": "idefics3_vision"},
        projector_patch_to_query_dict=ARIA_PATCH_TO_QUERY,
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )


def aria_crop_masks(seed: int, crops: int) -> torch.Tensor:
    """`(crops, H, W)`: the image processor pads each crop to a square; odd seeds' crops are padded on the right."""
    mask = torch.ones(crops, TINY_IMAGE_SIZE, TINY_IMAGE_SIZE, dtype=torch.long)
    if seed % 2:
        mask[..., TINY_IMAGE_SIZE - 5 :] = 0
    return mask


def build_aria_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    tokens_per_crop = ARIA_PATCH_TO_QUERY[(TINY_IMAGE_SIZE // config.vision_config.patch_size) ** 2]
    # `AriaProcessor`: each `<|img|>` becomes `num_crops * tokens_per_image` placeholders.
    runs = [[config.image_token_id] * (tiles_of(seed) * tokens_per_crop) for seed in image_seeds]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(tiles_of(seed), seed) for seed in image_seeds])
        inputs["pixel_mask"] = torch.cat([aria_crop_masks(seed, tiles_of(seed)) for seed in image_seeds])
    return inputs


register(
    FamilyCase(
        "aria",
        transformers.AriaForConditionalGeneration,
        tiny_aria_config,
        build_aria_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "pixel_mask"),
    )
)


# -- EXAONE 4.5 -------------------------------------------------------------------------------------------------------

EXAONE_VISION_START, EXAONE_VISION_END = 110, 111
PATCH_SIZE, TEMPORAL_PATCH_SIZE, MERGE_SIZE = 4, 2, 2
PATCH_DIM = 3 * TEMPORAL_PATCH_SIZE * PATCH_SIZE**2
# Grid `(t, h, w)` in patches of the image drawn with seed `s`: `IMAGE_GRIDS[s % 7 % 4]` (16x16, 8x16, 16x24, 24x8
# px); seed 7 has seed 0's grid (`test_image_already_in_cache_is_not_encoded` measures turn 1 with seed 0).
IMAGE_GRIDS = [(1, 4, 4), (1, 2, 4), (1, 4, 6), (1, 6, 2)]


def tiny_exaone4_5_config() -> transformers.Exaone4_5_Config:
    text = {**TINY_LLAMA, "model_type": "exaone4", "head_dim": 16, "sliding_window": 6}
    text["layer_types"] = ["sliding_attention", "full_attention"]
    # Two vision layers: one windowed, one full attention (`window_size` 16 px = one 2x2 merge window of patches).
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "num_key_value_heads": 1,
        "in_channels": 3,
        "patch_size": PATCH_SIZE,
        "spatial_merge_size": MERGE_SIZE,
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
        "window_size": 16,
        "fullatt_block_indexes": [1],
        "out_hidden_size": 32,
    }
    return transformers.Exaone4_5_Config(
        text_config=text, vision_config=vision, image_token_id=TINY_IMAGE_TOKEN_ID, video_token_id=123
    )


def tiny_hyperclovax_vision_v2_config() -> transformers.HyperCLOVAXVisionV2Config:
    exaone = tiny_exaone4_5_config()  # the same Qwen2.5-VL-like tiny tower
    vision = {key: value for key, value in exaone.vision_config.to_dict().items() if key != "num_key_value_heads"}
    return transformers.HyperCLOVAXVisionV2Config(
        text_config={**TINY_LLAMA, "model_type": "hyperclovax", "head_dim": 16},
        vision_config={**vision, "model_type": "qwen2_5_vl_vision"},
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=123,
    )


def tiny_lfm3_vl_config() -> transformers.Lfm3VlConfig:
    # A hybrid decoder: one short-convolution layer, one attention layer.
    text = {**TINY_LLAMA, "model_type": "lfm3", "head_dim": 16, "layer_types": ["conv", "full_attention"]}
    text.update(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "in_channels": 3,
        "patch_size": PATCH_SIZE,
        "spatial_merge_size": MERGE_SIZE,
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
    }
    return transformers.Lfm3VlConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=123,
        vision_start_token_id=EXAONE_VISION_START,
        vision_end_token_id=EXAONE_VISION_END,
        projector_hidden_size=32,
    )


def build_exaone4_5_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    grids = [IMAGE_GRIDS[seed % 7 % 4] for seed in image_seeds]
    # `Exaone4_5_Processor.replace_image_token`: `grid.prod() // merge_size**2` placeholders; the chat template puts
    # them between the vision start and end tokens.
    runs = [
        [EXAONE_VISION_START, *[config.image_token_id] * (t * h * w // MERGE_SIZE**2), EXAONE_VISION_END]
        for t, h, w in grids
    ]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        rows = [
            torch.randn(t * h * w, PATCH_DIM, generator=torch.Generator().manual_seed(seed))
            for (t, h, w), seed in zip(grids, image_seeds, strict=True)
        ]
        inputs["pixel_values"] = torch.cat(rows)  # (total_patches, patch_dim)
        inputs["image_grid_thw"] = torch.tensor(grids)
    return inputs


register(
    FamilyCase(
        "exaone4_5",
        transformers.Exaone4_5_ForConditionalGeneration,
        tiny_exaone4_5_config,
        build_exaone4_5_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_grid_thw"),
    )
)
register(
    FamilyCase(
        "hyperclovax_vision_v2",
        transformers.HyperCLOVAXVisionV2ForConditionalGeneration,
        tiny_hyperclovax_vision_v2_config,
        build_exaone4_5_inputs,  # its processor writes images exactly as EXAONE 4.5's
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_grid_thw"),
    )
)
register(
    FamilyCase(
        "lfm3_vl",
        transformers.Lfm3VlForConditionalGeneration,
        tiny_lfm3_vl_config,
        build_exaone4_5_inputs,  # its processor writes images exactly as EXAONE 4.5's
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_grid_thw"),
    )
)


# -- Video-LLaVA (images) ---------------------------------------------------------------------------------------------


def tiny_video_llava_config() -> transformers.VideoLlavaConfig:
    return transformers.VideoLlavaConfig(
        text_config=dict(TINY_LLAMA),
        vision_config={**TINY_SIGLIP, "model_type": "clip_vision_model", "num_hidden_layers": 2, "projection_dim": 32},
        image_token_index=TINY_IMAGE_TOKEN_ID,
        video_token_index=123,
    )


def build_video_llava_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    vision = config.vision_config
    # `VideoLlavaProcessor`: patches plus the CLS token (`num_additional_image_tokens=1`), minus 1 for "default".
    run = [config.image_token_id] * (vision.image_size // vision.patch_size) ** 2
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [run] * len(image_seeds))])}
    if image_seeds:
        # `pixel_values` as the image processor returns them with `return_legacy_image_output=False`
        inputs["pixel_values"] = torch.cat([random_pixels(1, seed) for seed in image_seeds])
    return inputs


register(
    FamilyCase(
        "video_llava",
        transformers.VideoLlavaForConditionalGeneration,
        tiny_video_llava_config,
        build_video_llava_inputs,
        per_token_keys=(),
    )
)


# -- Qianfan-OCR ------------------------------------------------------------------------------------------------------

QIANFAN_IMG_START, QIANFAN_IMG_END = 112, 113


def tiny_qianfan_ocr_config() -> transformers.QianfanOCRConfig:
    return transformers.QianfanOCRConfig(
        text_config={**TINY_LLAMA, "model_type": "qwen3", "head_dim": 16},
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": TINY_IMAGE_SIZE,
            "patch_size": 4,
        },
        image_token_id=TINY_IMAGE_TOKEN_ID,
        image_seq_length=4,  # 4x4 patches, CLS dropped ("default"), pixel-shuffled by 0.5
    )


def build_qianfan_ocr_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """`<img>`, `image_seq_length` placeholders per tile, `</img>` (as InternVL's processor writes them)."""
    runs = [
        [QIANFAN_IMG_START, *[config.image_token_id] * (config.image_seq_length * tiles_of(seed)), QIANFAN_IMG_END]
        for seed in image_seeds
    ]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(tiles_of(seed), seed) for seed in image_seeds])
    return inputs


register(
    FamilyCase(
        "qianfan_ocr",
        transformers.QianfanOCRForConditionalGeneration,
        tiny_qianfan_ocr_config,
        build_qianfan_ocr_inputs,
        per_token_keys=(),
    )
)
