"""InstructBLIP-Video: prompts and pixel inputs as its processor builds them.

Each video (the suite's `IMAGE` segments stand for videos here) is one run of `num_query_tokens * frames` video
placeholders; `pixel_values` is `(videos, frames, C, H, W)`, and each video's instruction for the Q-Former comes as
Q-Former ids, one row per video (InstructBLIP's: the prompt's last text tokens before it, padded).
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.families.cases_misc import _TEXT_PREFIX_SKIP, instructions_of
from support.llava_like_inputs import prompt_ids
from vlmprep.testing import random_pixels
from vlmprep.testing.configs.ivideo import TINY_VIDEO_FRAMES


def build_video_inputs(config, segments: list, video_seeds: list[int]) -> dict:
    """One tiny video of `TINY_VIDEO_FRAMES` frames per run, and one instruction row per video."""
    run = [config.video_token_id] * (config.num_query_tokens * TINY_VIDEO_FRAMES)
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [run] * len(video_seeds))])}
    if video_seeds:
        # (videos, frames, C, H, W); each frame its own draw, so frame order matters
        inputs["pixel_values"] = torch.stack([random_pixels(TINY_VIDEO_FRAMES, seed) for seed in video_seeds])
        ids, masks = instructions_of(segments)
        inputs["qformer_input_ids"] = torch.tensor(ids)
        inputs["qformer_attention_mask"] = torch.tensor(masks)
    return inputs


register(
    FamilyCase(
        "instructblipvideo",
        build_video_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "qformer_input_ids", "qformer_attention_mask"),
        upstream_needs_items=True,
        skip=_TEXT_PREFIX_SKIP,
    )
)
