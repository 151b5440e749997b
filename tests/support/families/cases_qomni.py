"""The Qwen3-Omni thinker: the Qwen2.5-Omni thinker's prompts (`cases_omni`), with its own clips.

Its processor counts a clip's placeholders as its tower subsamples it: 13 per window of `2 * n_window` (100) frames,
three stride-2 steps over the rest. Its tower pads every window of a call's clips to the longest one and its
convolutions read that padding, so clips shorter than a window change each other's features upstream (an upstream
batch effect, matched and checked in `tests/scenarios/test_audio_qwen3_omni.py`). The suite's clips are a second or
more, as real ones are: 140 frames, of which 140, 134, 128 or 122 are real (one full window and a padded one), 18, 18,
17 or 16 placeholders.
"""

from __future__ import annotations

import functools

import torch

from support.cases import FamilyCase, register
from support.families.cases_omni import build_qwen_omni_inputs
from vlmprep.testing.configs.omni import QWEN_OMNI_MEL_BINS
from vlmprep.testing.configs.qomni import QWEN3_OMNI_N_WINDOW

CLIP_FRAMES = 140


def qwen3_omni_audio_tokens(frames: int) -> int:
    """The processor's arithmetic: 13 placeholders per full window, then three stride-2 subsamplings of the rest."""
    window = 2 * QWEN3_OMNI_N_WINDOW
    rest = frames % window
    for _ in range(3):
        rest = (rest - 1) // 2 + 1
    return rest + frames // window * 13


def qwen3_omni_clip(seed: int, frames: int = CLIP_FRAMES) -> tuple[torch.Tensor, torch.Tensor, int]:
    """`(mel_bins, frames)` features, the mask of the real frames (6 fewer per `seed % 7 % 4`), the placeholders."""
    generator = torch.Generator().manual_seed(3000 + seed)
    features = torch.randn(QWEN_OMNI_MEL_BINS, frames, generator=generator)
    mask = torch.zeros(frames, dtype=torch.long)
    mask[: frames - 6 * (seed % 7 % 4)] = 1
    return features, mask, qwen3_omni_audio_tokens(int(mask.sum()))


register(
    FamilyCase(
        "qwen3_omni_moe_thinker",
        functools.partial(build_qwen_omni_inputs, clip_of=qwen3_omni_clip),
        per_token_keys=("attention_mask",),
        answer_token_types={"attention_mask": 1},
        pixel_keys=(
            "pixel_values",
            "image_grid_thw",
            "pixel_values_videos",
            "video_grid_thw",
            "video_second_per_grid",
            "input_features",
            "feature_attention_mask",
        ),
    )
)
