"""Muse Spark: Muse Glimmer's images and videos, and raw-waveform audio clips, as its processor builds them.

Images and videos are Muse Glimmer's (`cases_text_positions`). An audio clip is `<|soft_audio_start|>`, one `<|audio|>`
per started `samples_per_token` real samples (`MuseSparkProcessor.replace_audio_token`), `<|soft_audio_end|>`; its
waveform is 40 samples of which the first 40, 34, 28 or 22 are real (seed modulo 7 modulo 4), the rest zero padding
with `input_values_mask` 0, as the feature extractor pads: 10, 9, 7 or 6 audio tokens of 4 samples.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.families.cases_text_positions import image_grid, placeholder
from support.patch_grid_inputs import grid_prompt
from vlmprep.testing import AUDIO, TINY_AUDIO_TOKEN_ID, TINY_BOA_TOKEN_ID, TINY_EOA_TOKEN_ID
from vlmprep.testing.configs.omnib import MUSE_SPARK_PATCH_SIZES

MUSE_SPARK_SAMPLES = 40
SAMPLES_PER_TOKEN = MUSE_SPARK_PATCH_SIZES[0] * MUSE_SPARK_PATCH_SIZES[1]


def _waveform(seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    # The clip's padded samples, its mask and the processor's count of audio placeholders
    real = MUSE_SPARK_SAMPLES - 6 * (seed % 7 % 4)
    values = torch.zeros(MUSE_SPARK_SAMPLES)
    values[:real] = torch.randn(real, generator=torch.Generator().manual_seed(3000 + seed))
    mask = torch.zeros(MUSE_SPARK_SAMPLES, dtype=torch.long)
    mask[:real] = 1
    return values, mask, -(-real // SAMPLES_PER_TOKEN)


def build_muse_spark_inputs(config, segments: list, item_seeds: list[int]) -> dict:
    """Muse Spark prompts: Muse Glimmer's images and videos, audio clips between their start and end tokens."""
    seeds = iter(item_seeds)
    visual_segments, visual_seeds, clips = [], [], []
    for segment in segments:
        if isinstance(segment, list):
            visual_segments.append(segment)
        elif segment == AUDIO:
            clips.append(_waveform(next(seeds)))
            visual_segments.append([-len(clips)])  # marks where the clip goes
        else:
            visual_segments.append(segment)
            visual_seeds.append(next(seeds))
    ids, _, pixel_inputs, _ = grid_prompt(visual_segments, visual_seeds, image_grid, placeholder)
    prompt: list[int] = []
    for token in ids:
        if token >= 0:
            prompt.append(token)
        else:
            tokens = clips[-token - 1][2]
            prompt += [TINY_BOA_TOKEN_ID, *[TINY_AUDIO_TOKEN_ID] * tokens, TINY_EOA_TOKEN_ID]
    inputs = {"input_ids": torch.tensor([prompt]), **pixel_inputs}
    if clips:
        inputs["input_values"] = torch.stack([clip[0] for clip in clips])
        inputs["input_values_mask"] = torch.stack([clip[1] for clip in clips])
    return inputs


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
