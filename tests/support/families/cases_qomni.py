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

from support.audio_clips import padded_mask, real_length
from support.cases import FamilyCase, register
from support.families.cases_omni import QWEN_OMNI_PIXEL_KEYS, build_qwen_omni_inputs
from vlmprep.testing import AUDIO, VIDEO
from vlmprep.testing.configs.omni import QWEN_OMNI_AUDIO_END, QWEN_OMNI_AUDIO_START, QWEN_OMNI_MEL_BINS
from vlmprep.testing.configs.patch_grid import VISION_END, VISION_START
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
    mask = padded_mask(frames, real_length(frames, seed))
    return features, mask, qwen3_omni_audio_tokens(int(mask.sum()))


build_qwen3_omni_inputs = functools.partial(build_qwen_omni_inputs, clip_of=qwen3_omni_clip)
register(
    FamilyCase(
        "qwen3_omni_moe_thinker",
        build_qwen3_omni_inputs,
        rope_input_names={
            "second_per_grids": "video_second_per_grid",
            "audio_seqlens": "feature_attention_mask",
            "use_audio_in_video": None,
        },
        unread_inputs=frozenset({"audio_feature_lengths", "use_audio_in_video"}),
        per_token_keys=("attention_mask",),
        answer_token_types={"attention_mask": 1},
        pixel_keys=QWEN_OMNI_PIXEL_KEYS,
    )
)


# A video whose audio track the processor loaded (`use_audio_in_video=True`): one block of interleaved placeholders.
VIDEO_WITH_AUDIO = "<video+audio>"
_BUILDERS = {
    "qwen2_5_omni_thinker": build_qwen_omni_inputs,
    "qwen3_omni_moe_thinker": build_qwen3_omni_inputs,
}


def _chunk_sizes(times: list[float], per_chunk: int) -> list[int]:
    # The processor's chunking of a sorted list of times: a chunk ends where a time reaches the next multiple of
    # `per_chunk` (one boundary per token, so a gap of several chunks still opens one)
    sizes, start, chunk = [], 0, 1
    for index, time in enumerate(times):
        if time >= chunk * per_chunk:
            sizes.append(index - start)
            start, chunk = index, chunk + 1
    return [*sizes, len(times) - start]


def interleaved_block(config, grid: list[int], seconds: float, audio_tokens: int) -> list[int]:
    """A video's and its audio track's placeholders, in the order the family's processor writes them.

    Both are timed in position ids: the video's temporal patch `i` at `i * seconds * position_id_per_seconds`, the
    track's token `k` at `k`. The Qwen3-Omni processor merges the two by time, token by token (a video token first on a
    tie); the Qwen2.5-Omni one by chunks of `seconds_per_chunk`, each chunk's video tokens before its audio tokens.
    """
    frames, height, width = grid
    per_frame = height * width // 4  # 2x2 merged patches per placeholder
    video_times = [
        frame * seconds * config.position_id_per_seconds for frame in range(frames) for _ in range(per_frame)
    ]
    audio_times = list(range(audio_tokens))
    video, audio = config.video_token_id, config.audio_token_id
    if config.model_type == "qwen2_5_omni_thinker":
        per_chunk = int(config.position_id_per_seconds * config.seconds_per_chunk)
        video_chunks, audio_chunks = _chunk_sizes(video_times, per_chunk), _chunk_sizes(audio_times, per_chunk)
        tokens = []
        for chunk in range(max(len(video_chunks), len(audio_chunks))):
            tokens += [video] * (video_chunks[chunk] if chunk < len(video_chunks) else 0)
            tokens += [audio] * (audio_chunks[chunk] if chunk < len(audio_chunks) else 0)
        return tokens
    tokens, next_video, next_audio = [], 0, 0
    while next_video < len(video_times) and next_audio < len(audio_times):
        if video_times[next_video] <= audio_times[next_audio]:
            tokens.append(video)
            next_video += 1
        else:
            tokens.append(audio)
            next_audio += 1
    return tokens + [video] * (len(video_times) - next_video) + [audio] * (len(audio_times) - next_audio)


def build_audio_in_video_inputs(config, segments: list, item_seeds: list[int]) -> dict:
    """A Qwen-Omni thinker prompt in which `VIDEO_WITH_AUDIO` is a video with its audio track (drawn with the same
    seed), `<vision_start><audio_start>`, their interleaved placeholders, `<audio_end><vision_end>`, and
    `use_audio_in_video=True`; other segments as the family case builds them. The track is a clip of
    `input_features`, in prompt order among the clips."""
    expanded, seeds, with_track = [], [], []
    for segment in segments:
        if isinstance(segment, list):
            expanded.append(segment)
            continue
        expanded += [VIDEO, AUDIO] if segment == VIDEO_WITH_AUDIO else [segment]
        if segment in (VIDEO, VIDEO_WITH_AUDIO):
            with_track.append(segment == VIDEO_WITH_AUDIO)
    iterator = iter(item_seeds)
    for segment in segments:
        if isinstance(segment, list):
            continue
        seed = next(iterator)
        seeds += [seed, seed] if segment == VIDEO_WITH_AUDIO else [seed]
    inputs = _BUILDERS[config.model_type](config, expanded, seeds)
    ids, rewritten, video = inputs["input_ids"][0].tolist(), [], 0
    position = 0
    while position < len(ids):
        token = ids[position]
        starts_video = token == VISION_START and ids[position + 1] == config.video_token_id
        if not (starts_video and with_track[video]):
            video += int(starts_video)
            rewritten.append(token)
            position += 1
            continue
        video_end = ids.index(VISION_END, position)
        audio_end = ids.index(QWEN_OMNI_AUDIO_END, video_end)
        audio_tokens = audio_end - video_end - 2  # between `<vision_end><audio_start>` and `<audio_end>`
        grid, seconds = inputs["video_grid_thw"][video].tolist(), float(inputs["video_second_per_grid"][video])
        block = interleaved_block(config, grid, seconds, audio_tokens)
        rewritten += [VISION_START, QWEN_OMNI_AUDIO_START, *block, QWEN_OMNI_AUDIO_END, VISION_END]
        position, video = audio_end + 1, video + 1
    inputs["input_ids"] = torch.tensor([rewritten])
    inputs["attention_mask"] = torch.ones(1, len(rewritten), dtype=torch.long)
    inputs["use_audio_in_video"] = True
    return inputs
