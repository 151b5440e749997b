"""LLaVA-like families with one tile per item, the tiles of every image flattened in `pixel_values`: Aya Vision,
Cohere2 Vision, InternVL, Qianfan-OCR, GOT-OCR2, Llama 4 and LFM2-VL (SigLIP2 NaFlex rows).

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
Placeholder counts follow each processor's own arithmetic (called on a stand-in where the processor can be imported),
never the drop-in under test. Shared pieces (seeded images, prompts, batches): `llava_like_inputs.py`.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import pixels, prompt_ids, size_of, tile_pixels, tiles_of

# Aya Vision and Cohere2 Vision: start, end, a tile's marker, the global view's marker; Cohere2's line break.
AYA_START, AYA_END, AYA_TILE, AYA_GLOBAL = 112, 113, 114, 115
COHERE_LINE_BREAK = 116
# `<img>` and `</img>` around an image's tiles (InternVL, Qianfan-OCR, GOT-OCR2).
IMG_START, IMG_END = 112, 113
GOT_TOKENS_PER_TILE = 4  # GOT-OCR2's `num_image_tokens`: a tile's 8x8 SAM patches, 2x2-pooled twice
# Llama 4's `<|image_start|>`, `<|image_end|>`, `<|tile_x_separator|>`, `<|tile_y_separator|>` and `<|image|>`.
LLAMA4_START, LLAMA4_END, LLAMA4_TILE_X, LLAMA4_TILE_Y, LLAMA4_IMAGE = 112, 113, 114, 115, 116


def shuffled_tile_run(config) -> list[int]:
    """A tile's placeholders after the pixel shuffle of Aya Vision and Cohere2 Vision."""
    vision = config.vision_config
    return [config.image_token_id] * (vision.image_size // vision.patch_size // config.downsample_factor) ** 2


def aya_image_tokens(config, seed: int) -> list[int]:
    """`AyaVisionProcessor.replace_image_token`: start, a marker and a placeholder run per tile (global last), end."""
    run = shuffled_tile_run(config)
    local = [token for _ in range(tiles_of(seed) - 1) for token in [AYA_TILE, *run]]
    return [AYA_START, *local, AYA_GLOBAL, *run, AYA_END]


def cohere2_image_tokens(config, seed: int) -> list[int]:
    """`Cohere2VisionProcessor.replace_image_token`: start, per tile its placeholders and a line break, end."""
    return [AYA_START, *([*shuffled_tile_run(config), COHERE_LINE_BREAK] * tiles_of(seed)), AYA_END]


def internvl_image_tokens(config, seed: int) -> list[int]:
    """`InternVLProcessor.replace_image_token` (Qianfan-OCR's too): `<img>`, `image_seq_length` placeholders per tile,
    `</img>`."""
    return [IMG_START, *[config.image_token_id] * (config.image_seq_length * tiles_of(seed)), IMG_END]


def got_ocr2_image_tokens(config, seed: int) -> list[int]:
    """`GotOcr2Processor`: `<img>`, `num_image_tokens` `<imgpad>` per tile, `</img>`."""
    return [IMG_START, *[config.image_token_id] * (GOT_TOKENS_PER_TILE * tiles_of(seed)), IMG_END]


def llama4_image_tokens(config, seed: int) -> list[int]:
    """`Llama4Processor._prompt_split_image`: start; for a tiled image each local tile's run, an x separator between
    the tiles of a row and a y separator after each row (here one row of `tiles_of(seed) - 1` tiles); `<|image|>` and
    the global view's run; end. A tile's run is `(image_size // patch_size) ** 2 // round(1 / ratio ** 2)`."""
    vision = config.vision_config
    downsample_ratio = int(round(1.0 / vision.pixel_shuffle_ratio**2))
    run = [config.image_token_id] * ((vision.image_size // vision.patch_size) ** 2 // downsample_ratio)
    local_tiles = tiles_of(seed) - 1
    row = [token for _ in range(local_tiles) for token in [LLAMA4_TILE_X, *run]][1:]  # separators between tiles
    local = [*row, LLAMA4_TILE_Y] if local_tiles else []
    return [LLAMA4_START, *local, LLAMA4_IMAGE, *run, LLAMA4_END]


def tile_inputs(image_tokens):
    """A builder of prompts whose images are runs of `image_tokens(config, seed)` and whose tiles are flattened in
    `pixel_values` `(total_tiles, C, H, W)`."""

    def build_inputs(config, segments: list, image_seeds: list[int]) -> dict:
        runs = [image_tokens(config, seed) for seed in image_seeds]
        inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
        if image_seeds:
            inputs["pixel_values"] = tile_pixels(config, image_seeds)
        return inputs

    return build_inputs


for name, image_tokens in (
    ("aya_vision", aya_image_tokens),
    ("cohere2_vision", cohere2_image_tokens),
    ("internvl", internvl_image_tokens),
    ("qianfan_ocr", internvl_image_tokens),
    ("got_ocr2", got_ocr2_image_tokens),
):
    # Their forwards take `image_sizes` but never read it once features are supplied
    unread = frozenset({"image_sizes"}) if name != "got_ocr2" else frozenset()
    register(FamilyCase(name, tile_inputs(image_tokens), per_token_keys=(), unread_inputs=unread))

# Llama 4's NoPE layers scale queries by each token's place in the cache (`attn_temperature_tuning`), padding included
_LLAMA4_PADDING_MOVES_UPSTREAM = (
    "transformers' Llama 4 scales NoPE-layer queries by each token's place in the cache, padding included, so a "
    "left-padded row differs from its prompt alone upstream too; test_differential.py checks padded batches, chunked "
    "or not, against upstream's forward of the same batch"
)
register(
    FamilyCase(
        "llama4",
        tile_inputs(llama4_image_tokens),
        per_token_keys=(),
        skip={
            "left_padded_batch_matches_solo_runs": _LLAMA4_PADDING_MOVES_UPSTREAM,
            "chunked_batch_matches_unchunked_batch": _LLAMA4_PADDING_MOVES_UPSTREAM,
        },
        padding_moves_upstream=True,
    )
)


# -- LFM2-VL: SigLIP2 NaFlex rows (tiles or whole images) of any patch grid -------------------------------------------

LFM2_START, LFM2_END, LFM2_TILE_TAG, LFM2_THUMBNAIL = 112, 113, 114, 115
# Patch grid (rows, columns) of the whole image / thumbnail drawn with a seed (see `size_of`); tiles are 4x4 patches.
NAFLEX_SHAPES = [(4, 4), (2, 4), (4, 2), (2, 2)]


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
        build_lfm2_vl_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "spatial_shapes", "pixel_attention_mask"),
        samples=("all_zero_mask_row", "state_snapshots"),
    )
)
