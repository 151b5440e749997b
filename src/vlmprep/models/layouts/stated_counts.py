"""Layouts whose families state their placeholder counts themselves: no shared hook code, the name and description only.

A family of one of these layouts states it as a value (`layout = FIXED_IMAGE`) and its counts in its `VisionFacts` (a
fixed count per image) or in hooks of its own.
"""

from __future__ import annotations

from . import Layout

__all__ = [
    "ANYRES_CROPS_PER_SAMPLE",
    "ENCODER_PROMPT_IMAGE",
    "CROSS_ATTENDED_TILES",
    "FIXED_IMAGE",
    "LINEAR_PATCHES",
    "NAFLEX_TILES",
    "PATCH_ROWS_AND_AUDIO",
    "PROJECTOR_CROPS",
    "SIZED_IMAGE",
    "TILES",
]

# Gemma3, PaliGemma, Chameleon, Ovis2
FIXED_IMAGE = Layout("fixed_image", "one fixed-resolution image, one run of a fixed count of placeholders")

# Florence-2, T5Gemma 2: encoder-decoders whose images fill placeholders of the encoder's prompt
ENCODER_PROMPT_IMAGE = Layout(
    "encoder_prompt_image",
    "an encoder-decoder: each image is one run of placeholders in the encoder's prompt, its count fixed for an image "
    "size; the decoder cross-attends to the encoder's output",
)

# Llama 3.2 Vision (mllama)
CROSS_ATTENDED_TILES = Layout(
    "cross_attended_tiles",
    "an image's tiles are cross-attention states, not placeholder rows; one marker token per image starts its mask",
)

# Emu3
SIZED_IMAGE = Layout(
    "sized_image",
    "an image of any size (padded to the batch's largest) is one run, its count from `image_sizes` by the family",
)

# Fuyu
LINEAR_PATCHES = Layout(
    "linear_patches", "each flattened patch (embedded by one linear layer) is one item of one placeholder"
)

# InternVL, Qianfan-OCR, GOT-OCR2, Llama 4
TILES = Layout("tiles", "each tile (or crop) of an image is one item with a fixed placeholder count")

# LFM2-VL
NAFLEX_TILES = Layout(
    "naflex_tiles", "each row of `pixel_values` (a tile of any shape) is one item, merged patch grid"
)

# Aria
PROJECTOR_CROPS = Layout("projector_crops", "each crop is one item; the projector's query count follows the crop size")

# LLaVA-OneVision
ANYRES_CROPS_PER_SAMPLE = Layout(
    "anyres_crops_per_sample", "anyres crops; the images of a multi-image sample are one item with the base crop only"
)

# Gemma 4: the family states its counts from the position ids and the audio mask
PATCH_ROWS_AND_AUDIO = Layout(
    "patch_rows_and_audio",
    "an image is one run of its pooled patch rows (a video one run per frame); an audio clip one run of its "
    "subsampled frames",
)
