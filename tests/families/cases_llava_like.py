"""LLaVA-like families: tiny configs, and prompts and pixel inputs as each family's processor builds them.

The families fall into a few layouts, which decide what one *item* of vlmprep's span mechanism is:

- one image per run, its count from its size: LLaVA-NeXT, LLaVA-NeXT-Video, LLaVA-OneVision ("anyres": crops of the
  image in `(images, crops, C, H, W)`), LightOnOCR (Pixtral, any size), VipLLaVA (fixed size);
- one image in several runs (rows of `[IMG]` split by `[IMG_BREAK]`): Mistral3;
- one tile per item, tiles flattened in `pixel_values`: Aya Vision, Cohere2 Vision, InternVL, GOT-OCR2, LFM2-VL;
- one sub-image per item in `(batch, sub-images, C, H, W)`: Idefics3, SmolVLM.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
Placeholder counts follow each processor's own arithmetic (called on a stand-in where the processor can be imported),
never the drop-in under test. Image sizes and tile counts are functions of the image seed (`size_of`, `tiles_of`).
"""

from __future__ import annotations

import functools
import types

import torch
import transformers
from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

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
# `head_dim` is stated for decoders whose config lacks the attribute: the bad-input cases read `config.head_dim`.
TINY_QWEN2 = {**TINY_LLAMA, "model_type": "qwen2", "head_dim": 16}
TINY_CLIP_8PX = {
    "model_type": "clip_vision_model",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "image_size": 8,
    "patch_size": 4,
    "projection_dim": 32,
}
TINY_SIGLIP_8PX = {**TINY_CLIP_8PX, "model_type": "siglip_vision_model"}


# -- Images drawn from a seed -----------------------------------------------------------------------------------------


def size_of(seed: int, sizes: list[tuple[int, int]]) -> tuple[int, int]:
    """The size of the image drawn with `seed`; sizes repeat every 7 seeds.

    Seed 7 must have seed 0's size: `test_image_already_in_cache_is_not_encoded` measures turn 1 with the default
    image seed (0) but builds the conversation with seed 7, so it assumes both images have the same token count.
    """
    return sizes[seed % 7 % len(sizes)]


def tiles_of(seed: int) -> int:
    """Tiles (or sub-images) of the image drawn with `seed`, its global view included: 3 for seeds 2, 6, 9, 13, ...

    Scenarios that count encoded images (`VisionRunCounter.images`, which counts tower rows: tiles) use seeds 0, 1,
    3, 4, 5, 7 and 8, so their images are single tiles; the chunked batch (seed 2) and the interleaved requests
    (seed 13) have multi-tile images.
    """
    return 3 if seed % 7 in (2, 6) else 1


def pixels(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def tile_pixels(config, image_seeds: list[int]) -> torch.Tensor:
    """`(total_tiles, C, H, W)`: the tiles of every image, in prompt order."""
    size = config.vision_config.image_size
    height, width = (size, size) if isinstance(size, int) else size  # InternVL states `[height, width]`
    return torch.cat([pixels((tiles_of(seed), 3, height, width), seed) for seed in image_seeds])


# -- Prompts and batches ----------------------------------------------------------------------------------------------


def prompt_ids(segments: list, image_token_runs: list[list[int]]) -> list[int]:
    """Text segments and images, each image replaced by its tokens (in order)."""
    ids: list[int] = []
    runs = iter(image_token_runs)
    for segment in segments:
        ids += next(runs) if segment is IMAGE else list(segment)
    return ids


def left_pad(value: torch.Tensor, width: int, fill: int) -> torch.Tensor:
    return torch.nn.functional.pad(value, (width - value.shape[-1], 0), value=fill)


def pad_dim(value: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """Zero-pad `value` along `dim` to `size` (processors pad per-image stacks to the batch's largest)."""
    missing = size - value.shape[dim]
    if missing == 0:
        return value
    shape = list(value.shape)
    shape[dim] = missing
    return torch.cat([value, value.new_zeros(shape)], dim=dim)


def collate_padded_patches(prompts: list, pad_token_id: int, patch_keys: tuple[str, ...] = ("pixel_values",)) -> dict:
    """Left-padded ids and mask; per-image crop stacks padded to the largest crop count; other inputs concatenated."""
    width = max(prompt.length for prompt in prompts)
    batch = {
        "input_ids": torch.cat([left_pad(p.input_ids, width, pad_token_id) for p in prompts]),
        "attention_mask": torch.cat([left_pad(torch.ones_like(p.input_ids), width, 0) for p in prompts]),
    }
    for key in prompts[0].full_inputs:
        values = [prompt.full_inputs[key] for prompt in prompts]
        if key in patch_keys:
            most = max(value.shape[1] for value in values)
            batch[key] = torch.cat([pad_dim(value, 1, most) for value in values])
        elif key != "input_ids":
            batch[key] = torch.cat(values)
    return batch


# -- LLaVA-NeXT -------------------------------------------------------------------------------------------------------

# Original (height, width) of the images (see `size_of`). Different aspect ratios pick different grid pinpoints and
# unpad differently, so the images of one prompt have different placeholder counts.
ANYRES_SIZES = [(8, 13), (13, 8), (6, 6), (16, 9)]
ANYRES_PINPOINTS = [[8, 8], [8, 16], [16, 8]]


def tiny_llava_next_config() -> transformers.LlavaNextConfig:
    return transformers.LlavaNextConfig(
        text_config=dict(TINY_LLAMA),
        vision_config=dict(TINY_CLIP_8PX),
        image_grid_pinpoints=ANYRES_PINPOINTS,
        image_token_index=TINY_IMAGE_TOKEN_ID,
        vision_feature_layer=-1,
    )


def llava_next_processor_stand_in(config) -> types.SimpleNamespace:
    """What `LlavaNextProcessor._get_number_of_features` reads from its processor, for this config."""
    stand_in = types.SimpleNamespace(
        image_processor=types.SimpleNamespace(image_grid_pinpoints=config.image_grid_pinpoints),
        patch_size=config.vision_config.patch_size,
        num_additional_image_tokens=1,  # CLIP's CLS token
    )
    processor_class = transformers.LlavaNextProcessor
    stand_in._get_unpadded_features = functools.partial(processor_class._get_unpadded_features, stand_in)
    return stand_in


def llava_next_tokens(config, image_size: tuple[int, int]) -> int:
    stand_in = llava_next_processor_stand_in(config)
    crop = config.vision_config.image_size
    count = transformers.LlavaNextProcessor._get_number_of_features(stand_in, *image_size, crop, crop)
    return count - 1 if config.vision_feature_select_strategy == "default" else count


def anyres_patches(config, image_size: tuple[int, int]) -> int:
    """Crops the image processor makes: the grid of the best pinpoint, plus the base crop."""
    return image_size_to_num_patches(image_size, config.image_grid_pinpoints, config.vision_config.image_size)


def build_llava_next_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    sizes = [size_of(seed, ANYRES_SIZES) for seed in image_seeds]
    runs = [[config.image_token_id] * llava_next_tokens(config, size) for size in sizes]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        crop = config.vision_config.image_size
        stacks = [
            pixels((anyres_patches(config, size), 3, crop, crop), seed)
            for size, seed in zip(sizes, image_seeds, strict=True)
        ]
        most = max(stack.shape[0] for stack in stacks)
        inputs["pixel_values"] = torch.stack(
            [pad_dim(stack, 0, most) for stack in stacks]
        )  # (images, patches, C, H, W)
        inputs["image_sizes"] = torch.tensor(sizes)
    return inputs


register(
    FamilyCase(
        "llava_next",
        transformers.LlavaNextForConditionalGeneration,
        tiny_llava_next_config,
        build_llava_next_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes"),
        collate=collate_padded_patches,
    )
)


# -- LLaVA-OneVision (images) -----------------------------------------------------------------------------------------


def tiny_llava_onevision_config() -> transformers.LlavaOnevisionConfig:
    # "anyres_max_1" makes every grid bigger than one crop's worth of tokens downsampled: that path is counted too.
    return transformers.LlavaOnevisionConfig(
        text_config=dict(TINY_QWEN2),
        vision_config=dict(TINY_SIGLIP_8PX),
        image_grid_pinpoints=ANYRES_PINPOINTS,
        image_token_index=TINY_IMAGE_TOKEN_ID,
        video_token_index=123,
        vision_aspect_ratio="anyres_max_1",
    )


def llava_onevision_tokens(config, image_size: tuple[int, int]) -> int:
    """`LlavaOnevisionProcessor`'s count for an image of a one-image sample (it gets its anyres grid)."""
    crop = config.vision_config.image_size
    stand_in = types.SimpleNamespace(
        image_processor=types.SimpleNamespace(image_grid_pinpoints=config.image_grid_pinpoints),
        num_image_tokens=(crop // config.vision_config.patch_size) ** 2,
        vision_aspect_ratio=config.vision_aspect_ratio,
    )
    processor_class = transformers.LlavaOnevisionProcessor
    stand_in._get_unpadded_features = functools.partial(processor_class._get_unpadded_features, stand_in)
    count = processor_class._get_number_of_features(stand_in, *image_size, crop, crop)
    return count - 1 if config.vision_feature_select_strategy == "default" else count


def build_llava_onevision_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """As the processor returns them for a flat list of images: `batch_num_images` all 1, every image with its grid."""
    sizes = [size_of(seed, ANYRES_SIZES) for seed in image_seeds]
    runs = [[config.image_token_id] * llava_onevision_tokens(config, size) for size in sizes]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        crop = config.vision_config.image_size
        stacks = [
            pixels((anyres_patches(config, size), 3, crop, crop), seed)
            for size, seed in zip(sizes, image_seeds, strict=True)
        ]
        most = max(stack.shape[0] for stack in stacks)
        inputs["pixel_values"] = torch.stack([pad_dim(stack, 0, most) for stack in stacks])  # (images, crops, C, H, W)
        inputs["image_sizes"] = torch.tensor(sizes)
        inputs["batch_num_images"] = torch.ones(len(sizes), dtype=torch.long)
    return inputs


register(
    FamilyCase(
        "llava_onevision",
        transformers.LlavaOnevisionForConditionalGeneration,
        tiny_llava_onevision_config,
        build_llava_onevision_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes", "batch_num_images"),
        collate=collate_padded_patches,
    )
)


# -- Mistral3 (Pixtral vision) ----------------------------------------------------------------------------------------

IMG_BREAK_ID, IMG_END_ID = 110, 111
# Processed (height, width) of the images (see `size_of`); 4x4 merged patches: rows of 1-4 `[IMG]` tokens.
PIXTRAL_SIZES = [(16, 16), (8, 16), (16, 8), (12, 8)]


def tiny_mistral3_config() -> transformers.Mistral3Config:
    return transformers.Mistral3Config(
        text_config={**TINY_LLAMA, "model_type": "mistral"},
        vision_config={
            "model_type": "pixtral",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 16,
            "patch_size": 2,
        },
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )


def pixtral_image_tokens(config, image_size: tuple[int, int]) -> list[int]:
    """`PixtralProcessor.replace_image_token`'s layout: rows of `[IMG]` each closed by `[IMG_BREAK]`, the last one by
    `[IMG_END]` (written out here: the processor module needs torchvision, which is not installed)."""
    merged_patch = config.vision_config.patch_size * config.spatial_merge_size
    rows, columns = image_size[0] // merged_patch, image_size[1] // merged_patch
    ids = [token for _ in range(rows) for token in [config.image_token_id] * columns + [IMG_BREAK_ID]]
    return ids[:-1] + [IMG_END_ID]


def build_mistral3_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    sizes = [size_of(seed, PIXTRAL_SIZES) for seed in image_seeds]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [pixtral_image_tokens(config, s) for s in sizes])])}
    if image_seeds:
        side = config.vision_config.image_size
        images = [
            pad_dim(pad_dim(pixels((3, h, w), seed), 1, side), 2, side)
            for (h, w), seed in zip(sizes, image_seeds, strict=True)
        ]
        inputs["pixel_values"] = torch.stack(images)  # (images, C, H, W), padded to the largest image
        inputs["image_sizes"] = torch.tensor(sizes)
    return inputs


register(
    FamilyCase(
        "mistral3",
        transformers.Mistral3ForConditionalGeneration,
        tiny_mistral3_config,
        build_mistral3_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes"),
    )
)


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


# -- Idefics3 and SmolVLM: sub-images in (batch, sub-images, C, H, W) -------------------------------------------------

FAKE_AROUND_IMAGE, GLOBAL_IMG, ROW_COL_TAG, NEWLINE = 112, 113, 114, 9


def tiny_idefics3_config() -> transformers.Idefics3Config:
    vision = {key: value for key, value in TINY_SIGLIP_8PX.items() if key != "model_type"}
    return transformers.Idefics3Config(
        text_config=dict(TINY_LLAMA),
        vision_config={**vision, "image_size": 16},
        image_token_id=TINY_IMAGE_TOKEN_ID,
    )


def idefics3_image_tokens(config, sub_images: int) -> list[int]:
    """`Idefics3Processor.replace_image_token`: one row of `sub_images - 1` crops (each behind its row/col tag), then
    the global image; every sub-image is a run of `image_seq_len` placeholders."""
    vision = config.vision_config
    run = [config.image_token_id] * ((vision.image_size // vision.patch_size) ** 2 // config.scale_factor**2)
    global_image = [FAKE_AROUND_IMAGE, GLOBAL_IMG, *run, FAKE_AROUND_IMAGE]
    if sub_images == 1:
        return global_image
    crops = [token for _ in range(sub_images - 1) for token in [FAKE_AROUND_IMAGE, ROW_COL_TAG, *run]]
    return [*crops, NEWLINE, NEWLINE, *global_image]


def build_idefics3_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """One sample: its sub-images (crops, then the global image) and their pixel masks.

    The global image is the whole image resized to fit, so its last 4 pixel columns are padding (0, masked).
    """
    runs = [idefics3_image_tokens(config, tiles_of(seed)) for seed in image_seeds]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        pixel_values = tile_pixels(config, image_seeds)  # (sub-images, C, H, W)
        mask = torch.ones(pixel_values.shape[0], *pixel_values.shape[2:], dtype=torch.long)
        global_rows = torch.tensor([tiles_of(seed) for seed in image_seeds]).cumsum(0) - 1
        mask[global_rows, :, -4:] = 0
        pixel_values[global_rows, :, :, -4:] = 0.0
        inputs["pixel_values"] = pixel_values.unsqueeze(0)  # (1, sub-images, C, H, W)
        inputs["pixel_attention_mask"] = mask.unsqueeze(0)
    return inputs


def collate_sub_images(prompts: list, pad_token_id: int) -> dict:
    """As the processor batches: samples' sub-image stacks padded with all-zero sub-images (masked out)."""
    return collate_padded_patches(prompts, pad_token_id, patch_keys=("pixel_values", "pixel_attention_mask"))


register(
    FamilyCase(
        "idefics3",
        transformers.Idefics3ForConditionalGeneration,
        tiny_idefics3_config,
        build_idefics3_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "pixel_attention_mask"),
        collate=collate_sub_images,
    )
)


def tiny_smolvlm_config() -> transformers.SmolVLMConfig:
    vision = {key: value for key, value in TINY_SIGLIP_8PX.items() if key != "model_type"}
    return transformers.SmolVLMConfig(
        text_config=dict(TINY_LLAMA),
        vision_config={**vision, "image_size": 16},
        image_token_id=TINY_IMAGE_TOKEN_ID,
    )


register(
    FamilyCase(
        "smolvlm",
        transformers.SmolVLMForConditionalGeneration,
        tiny_smolvlm_config,
        build_idefics3_inputs,  # SmolVLM's processor writes images exactly as Idefics3's
        per_token_keys=(),
        pixel_keys=("pixel_values", "pixel_attention_mask"),
        collate=collate_sub_images,
    )
)


# -- VipLLaVA: fixed resolution, one run per image --------------------------------------------------------------------


def tiny_vipllava_config() -> transformers.VipLlavaConfig:
    return transformers.VipLlavaConfig(
        text_config=dict(TINY_LLAMA),
        vision_config={**TINY_CLIP_8PX, "image_size": TINY_IMAGE_SIZE, "num_hidden_layers": 2},
        image_token_index=TINY_IMAGE_TOKEN_ID,
        vision_feature_layer=[-2, -1],
    )


def build_vipllava_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    vision = config.vision_config
    run = [config.image_token_id] * (vision.image_size // vision.patch_size) ** 2
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [run] * len(image_seeds))])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(1, seed) for seed in image_seeds])
    return inputs


register(
    FamilyCase(
        "vipllava",
        transformers.VipLlavaForConditionalGeneration,
        tiny_vipllava_config,
        build_vipllava_inputs,
        per_token_keys=(),
    )
)


# -- LLaVA-NeXT-Video (images): LLaVA-NeXT's anyres images ------------------------------------------------------------


def tiny_llava_next_video_config() -> transformers.LlavaNextVideoConfig:
    return transformers.LlavaNextVideoConfig(
        text_config=dict(TINY_LLAMA),
        vision_config=dict(TINY_CLIP_8PX),
        image_grid_pinpoints=ANYRES_PINPOINTS,
        image_token_index=TINY_IMAGE_TOKEN_ID,
        video_token_index=123,
        vision_feature_layer=-1,
    )


register(
    FamilyCase(
        "llava_next_video",
        transformers.LlavaNextVideoForConditionalGeneration,
        tiny_llava_next_video_config,
        build_llava_next_inputs,  # its processor writes images exactly as LLaVA-NeXT's
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes"),
        collate=collate_padded_patches,
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


# -- LightOnOCR: Pixtral vision, one run per image --------------------------------------------------------------------


def tiny_lighton_ocr_config() -> transformers.LightOnOcrConfig:
    pixtral = tiny_mistral3_config().vision_config.to_dict()
    return transformers.LightOnOcrConfig(
        text_config={**TINY_QWEN2, "model_type": "qwen3"},
        vision_config=pixtral,
        image_token_id=TINY_IMAGE_TOKEN_ID,
    )


def build_lighton_ocr_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """`LightOnOcrProcessor.replace_image_token`: `rows * columns` placeholders, no break tokens."""
    inputs = build_mistral3_inputs(config, segments, image_seeds)
    merged_patch = config.vision_config.patch_size * config.spatial_merge_size
    runs = [
        [config.image_token_id] * ((height // merged_patch) * (width // merged_patch))
        for height, width in (size_of(seed, PIXTRAL_SIZES) for seed in image_seeds)
    ]
    inputs["input_ids"] = torch.tensor([prompt_ids(segments, runs)])
    return inputs


register(
    FamilyCase(
        "lighton_ocr",
        transformers.LightOnOcrForConditionalGeneration,
        tiny_lighton_ocr_config,
        build_lighton_ocr_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes"),
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
