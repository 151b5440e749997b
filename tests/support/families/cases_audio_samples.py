"""The families whose audio placeholders are counted from a clip's waveform samples, Muse Spark, Apertus 1.5 and Dots 3
Note: images (and videos) and audio clips, as their processors build them.

Images and videos are Muse Glimmer's (`cases_text_positions`). An audio clip is `<|soft_audio_start|>`, one `<|audio|>`
per started `samples_per_token` real samples (`MuseSparkProcessor.replace_audio_token`), `<|soft_audio_end|>`; its
waveform is 40 samples of which the first 40, 34, 28 or 22 are real (seed modulo 7 modulo 4), the rest zero padding
with `input_values_mask` 0, as the feature extractor pads: 10, 9, 7 or 6 audio tokens of 4 samples.
"""

from __future__ import annotations

import torch

from support.audio_clips import add_clips, audio_run, padded_mask, real_length, splice_clips, split_clips
from support.cases import FamilyCase, register
from support.families.cases_text_positions import image_grid, placeholder
from support.patch_grid_inputs import grid_prompt, merged_tokens
from support.segments import with_seeds
from vlmprep.testing import (
    AUDIO,
    IMAGE,
    TINY_BOI_TOKEN_ID,
    TINY_EOI_TOKEN_ID,
    TINY_IMAGE_TOKEN_ID,
    TINY_VIDEO_TOKEN_ID,
)
from vlmprep.testing.configs.audio_samples import (
    APERTUS1P5_HOP_LENGTH,
    APERTUS1P5_SPATIAL_FACTOR,
    DOTS3_NOTE_HOP_LENGTH,
    DOTS3_NOTE_MEL_BINS,
    MUSE_SPARK_PATCH_SIZES,
)
from vlmprep.testing.configs.patch_grid import PATCH_SIZE, VISION_END, VISION_START

MUSE_SPARK_SAMPLES = 40
SAMPLES_PER_TOKEN = MUSE_SPARK_PATCH_SIZES[0] * MUSE_SPARK_PATCH_SIZES[1]


def _waveform(seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    # The clip's padded samples, its mask and the processor's count of audio placeholders
    real = real_length(MUSE_SPARK_SAMPLES, seed)
    values = torch.zeros(MUSE_SPARK_SAMPLES)
    values[:real] = torch.randn(real, generator=torch.Generator().manual_seed(3000 + seed))
    return values, padded_mask(MUSE_SPARK_SAMPLES, real), -(-real // SAMPLES_PER_TOKEN)


def build_muse_spark_inputs(config, segments: list, item_seeds: list[int]) -> dict:
    """Muse Spark prompts: Muse Glimmer's images and videos, audio clips between their start and end tokens."""
    visual_segments, visual_seeds, clips = split_clips(segments, item_seeds, _waveform)
    ids, _, pixel_inputs, _ = grid_prompt(visual_segments, visual_seeds, image_grid, placeholder)
    prompt = splice_clips(ids, clips, lambda clip: audio_run(clip[2]))
    inputs = {"input_ids": torch.tensor([prompt]), **pixel_inputs}
    return add_clips(inputs, clips, "input_values", "input_values_mask")


register(
    FamilyCase(
        "muse_spark",
        build_muse_spark_inputs,
        per_token_keys=(),
        pixel_keys=(
            "pixel_values",
            "image_grid_thw",
            "pixel_values_videos",
            "video_grid_thw",
            "input_values",
            "input_values_mask",
        ),
    )
)


# Apertus 1.5's structure tokens (`Apertus1p5Processor`): an image is `<boi>`, its grid size as text (`h*w`),
# `<image_wrapper>`, its grid rows of placeholders split by `<eol>`, `<eoi>`; an audio clip `<boa>`, its codes, `<eoa>`.
APERTUS_WRAPPER, APERTUS_EOL = 118, 119
APERTUS_TIMES = 60  # the text token `*` of the grid size
APERTUS_SAMPLES = 40
APERTUS_CANVAS = 8  # px: the largest image
# (height, width) px by seed modulo 7 modulo 4; at least 2x2 codes (the tokenizer normalizes its latent per group)
APERTUS_IMAGE_SIZES = ((4, 4), (4, 8), (8, 4), (8, 8))


def _apertus_image(seed: int) -> tuple[torch.Tensor, tuple[int, int], list[int]]:
    height, width = APERTUS_IMAGE_SIZES[seed % 7 % 4]
    pixels = torch.rand(3, height, width, generator=torch.Generator().manual_seed(seed)) * 2 - 1  # in [-1, 1]
    rows, columns = height // APERTUS1P5_SPATIAL_FACTOR, width // APERTUS1P5_SPATIAL_FACTOR
    grid = [*[TINY_IMAGE_TOKEN_ID] * columns]
    for _ in range(rows - 1):
        grid += [APERTUS_EOL, *[TINY_IMAGE_TOKEN_ID] * columns]
    ids = [TINY_BOI_TOKEN_ID, 50 + rows, APERTUS_TIMES, 50 + columns, APERTUS_WRAPPER, *grid, TINY_EOI_TOKEN_ID]
    return pixels, (height, width), ids


def _apertus_clip(seed: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    real = real_length(APERTUS_SAMPLES, seed)
    values = torch.zeros(1, APERTUS_SAMPLES)
    values[0, :real] = torch.randn(real, generator=torch.Generator().manual_seed(4000 + seed))
    return values, padded_mask(APERTUS_SAMPLES, real), audio_run(-(-real // APERTUS1P5_HOP_LENGTH))


def build_apertus1p5_inputs(config, segments: list, item_seeds: list[int]) -> dict:
    """Apertus 1.5 prompts: images padded to 8 px with their `image_sizes`, clips padded to 40
    samples with their `padding_mask` (40, 34, 28 or 22 real, by seed)."""
    ids: list[int] = []
    images, clips = [], []
    for segment, seed in with_seeds(segments, item_seeds):
        if seed is None:
            ids += segment
        elif segment == AUDIO:
            values, mask, run = _apertus_clip(seed)
            clips.append((values, mask))
            ids += run
        elif segment != IMAGE:
            raise ValueError(f"Apertus 1.5 takes images and audio clips, not {segment}")
        else:
            pixels, size, run = _apertus_image(seed)
            images.append((pixels, size))
            ids += run
    inputs = {"input_ids": torch.tensor([ids])}
    if images:
        # The image processor zero-pads a batch's images to its largest; here to the largest of any batch (8 px),
        # so that rows of a batch concatenate (upstream crops each image to its size: the padding is never read)
        canvas = torch.zeros(len(images), 3, APERTUS_CANVAS, APERTUS_CANVAS)
        for index, (pixels, size) in enumerate(images):
            canvas[index, :, : size[0], : size[1]] = pixels
        inputs["pixel_values"] = canvas
        inputs["image_sizes"] = torch.tensor([size for _, size in images])
    return add_clips(inputs, clips, "input_values", "padding_mask")


register(
    FamilyCase(
        "apertus1p5",
        build_apertus1p5_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes", "input_values", "padding_mask"),
        skip={
            "bad_input_wrong_resolution": (
                "any canvas holding every image of `image_sizes` is valid Apertus 1.5 input (the processor pads a "
                "batch's images to its largest, upstream crops each to its size), so larger pixels are not "
                "malformed; smaller ones are refused"
            )
        },
    )
)


# Dots 3 Note: Qwen2-VL's `<|vision_start|>`, run, `<|vision_end|>` around an image or a video (one run each, one frame
# a patch); an audio clip `<|audio_start|>`, its chunks' placeholders back to back, `<|audio_end|>`.
DOTS_AUDIO_START, DOTS_AUDIO_END = 116, 117
DOTS_CHUNK_SAMPLES = (320, 272, 224, 176)  # the first chunk's samples by seed modulo 7 modulo 4: 10, 9, 7, 6 tokens
DOTS_SECOND_CHUNK_SAMPLES = 96  # seed modulo 7 modulo 4 == 2: the clip is longer than a chunk, 3 more tokens
DOTS_PATCH_SHAPE = (3 * PATCH_SIZE**2,)  # one frame a patch
DOTS_FRAMES = DOTS_CHUNK_SAMPLES[0] // DOTS3_NOTE_HOP_LENGTH  # the longest chunk's frames (8 a token)


def _dots_placeholder(medium: str, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    token = TINY_IMAGE_TOKEN_ID if medium is IMAGE else TINY_VIDEO_TOKEN_ID
    ids = [VISION_START, *[token] * merged_tokens(grid), VISION_END]
    return ids, [0] * len(ids)


def _dots_chunks(seed: int) -> list[tuple[torch.Tensor, int]]:
    # The clip's chunks: log-mel frames (8 a token, zero after the real ones) and their samples
    shape = seed % 7 % 4
    lengths = [DOTS_CHUNK_SAMPLES[shape], *([DOTS_SECOND_CHUNK_SAMPLES] if shape == 2 else [])]
    generator = torch.Generator().manual_seed(5000 + seed)
    chunks = []
    for samples in lengths:
        features = torch.zeros(DOTS3_NOTE_MEL_BINS, DOTS_FRAMES)
        frames = samples // DOTS3_NOTE_HOP_LENGTH
        features[:, :frames] = torch.randn(DOTS3_NOTE_MEL_BINS, frames, generator=generator)
        chunks.append((features, samples))
    return chunks


def build_dots3_note_inputs(config, segments: list, item_seeds: list[int]) -> dict:
    """Dots 3 Note prompts: images and videos as Qwen2-VL's with 1D positions, audio clips of one or two chunks."""
    per_token = DOTS3_NOTE_HOP_LENGTH * 8
    visual_segments, visual_seeds, clips = split_clips(segments, item_seeds, _dots_chunks)
    ids, _, pixel_inputs, _ = grid_prompt(
        visual_segments, visual_seeds, image_grid, _dots_placeholder, DOTS_PATCH_SHAPE
    )
    prompt = splice_clips(
        ids,
        clips,
        lambda chunks: audio_run(
            sum(-(-samples // per_token) for _, samples in chunks), DOTS_AUDIO_START, DOTS_AUDIO_END
        ),
    )
    inputs = {"input_ids": torch.tensor([prompt]), **pixel_inputs}
    chunks = [chunk for clip in clips for chunk in clip]
    if chunks:
        inputs["input_features"] = torch.stack([features for features, _ in chunks])
        inputs["chunk_sample_lengths"] = torch.tensor([samples for _, samples in chunks])
    return inputs


register(
    FamilyCase(
        "dots3_note",
        build_dots3_note_inputs,
        per_token_keys=(),
        pixel_keys=(
            "pixel_values",
            "image_grid_thw",
            "pixel_values_videos",
            "video_grid_thw",
            "input_features",
            "chunk_sample_lengths",
        ),
    )
)
