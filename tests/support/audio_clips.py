"""Audio clips in the family cases' prompts: one home for what the omni builders share.

A case draws a clip from a seed, padded to a fixed length of which the first `length - step * (seed % 7 % 4)` samples
(or frames) are real, as feature extractors pad a batch; the prompt holds the clip's run of placeholders between its
start and end tokens. Builders that reuse an image-and-video prompt builder (`grid_prompt`) mark each clip with a
negative token, then splice its run in (`split_clips`, `splice_clips`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from support.segments import with_seeds
from vlmprep.testing import AUDIO, TINY_AUDIO_TOKEN_ID, TINY_BOA_TOKEN_ID, TINY_EOA_TOKEN_ID


def real_length(length: int, seed: int, step: int = 6) -> int:
    """The real samples (or frames) of a clip padded to `length`: `step` fewer per `seed % 7 % 4`."""
    return length - step * (seed % 7 % 4)


def padded_mask(length: int, real: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """The mask of a clip padded at the end: its first `real` places set."""
    mask = torch.zeros(length, dtype=dtype)
    mask[:real] = 1
    return mask


def audio_run(tokens: int, start: int = TINY_BOA_TOKEN_ID, end: int | None = TINY_EOA_TOKEN_ID) -> list[int]:
    """A clip's placeholders after its start token and before its end token (`None`: a processor that writes none)."""
    return [start, *[TINY_AUDIO_TOKEN_ID] * tokens, *([] if end is None else [end])]


def split_clips(segments: list, item_seeds: list[int], clip_of: Callable[[int], object]) -> tuple[list, list, list]:
    """Takes the clips out of a prompt's segments, each drawn with its seed by `clip_of`, a marker `[-n]` (the n-th
    clip) in its place.

    Returns:
        `(segments, seeds, clips)`: the segments and seeds of the text, images and videos, and the clips in order.
    """
    visual_segments, visual_seeds, clips = [], [], []
    for segment, seed in with_seeds(segments, item_seeds):
        if seed is None:
            visual_segments.append(segment)
        elif segment == AUDIO:
            clips.append(clip_of(seed))
            visual_segments.append([-len(clips)])  # marks where the clip goes
        else:
            visual_segments.append(segment)
            visual_seeds.append(seed)
    return visual_segments, visual_seeds, clips


def splice_clips(ids: Sequence[int], clips: list, run_of: Callable[[object], list[int]]) -> list[int]:
    """The prompt with each clip marker of `split_clips` replaced by `run_of(clip)`."""
    prompt: list[int] = []
    for token in ids:
        if token >= 0:
            prompt.append(token)
        else:
            prompt += run_of(clips[-token - 1])
    return prompt


def add_clips(inputs: dict, clips: list, features_key: str, mask_key: str) -> dict:
    """Adds the clips' stacked features (each clip's first element) and masks (its second), if there are clips."""
    if clips:
        inputs[features_key] = torch.stack([clip[0] for clip in clips])
        inputs[mask_key] = torch.stack([clip[1] for clip in clips])
    return inputs
