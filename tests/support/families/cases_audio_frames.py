"""The families whose audio clips are log-mel frames with a mask of the real ones (Gemma 4, the Qwen2.5-Omni and
Qwen3-Omni thinkers): images, videos and audio clips in one prompt, as their processors build them.

Gemma 4: an image is `<boi>`, its soft tokens, `<eoi>` (`mm_token_type_ids` 1); a video is one such run per frame
(type 2) after the frame's timestamp; an audio clip is `<boa>`, its soft tokens, `<eoa>` (type 3). Images are 4 px patch
rows padded to 16 patches, of 4x4, 2x4, 4x2 or 2x2 patches (seed modulo 7 modulo 4) pooled 2x2; audio clips are 40
frames of 16 mel bins, of which the first 40, 34, 28 or 22 are real (same rule), 10, 9, 7 or 6 soft tokens.
"""

from __future__ import annotations

import functools

import torch

from support.audio_clips import add_clips, audio_run, padded_mask, real_length, splice_clips, split_clips
from support.cases import FamilyCase, register
from support.patch_grid_inputs import IMAGE_GRIDS, grid_prompt, merged_tokens
from support.segments import with_seeds
from vlmprep.testing import (
    AUDIO,
    IMAGE,
    TINY_BOI_TOKEN_ID,
    TINY_EOI_TOKEN_ID,
    TINY_IMAGE_TOKEN_ID,
    TINY_VIDEO_TOKEN_ID,
    VIDEO,
)
from vlmprep.testing.configs.audio_frames import (
    GEMMA4_MAX_PATCHES,
    GEMMA4_MEL_BINS,
    GEMMA4_PATCH_SIZE,
    GEMMA4_POOLING,
    QWEN3_OMNI_N_WINDOW,
    QWEN_OMNI_AUDIO_END,
    QWEN_OMNI_AUDIO_START,
    QWEN_OMNI_MEL_BINS,
)
from vlmprep.testing.configs.patch_grid import VISION_END, VISION_START

GRIDS = ((4, 4), (2, 4), (4, 2), (2, 2))  # (height, width) in patches
AUDIO_FRAMES = 40
FRAMES_PER_VIDEO = 2


def _patch_rows(seed: int, grid: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    # One image (or frame): its patch rows and `(x, y)` positions padded to the patch budget, and its soft tokens.
    height, width = grid
    generator = torch.Generator().manual_seed(seed)
    rows = torch.zeros(GEMMA4_MAX_PATCHES, 3 * GEMMA4_PATCH_SIZE**2)
    positions = torch.full((GEMMA4_MAX_PATCHES, 2), -1, dtype=torch.long)
    real = height * width
    rows[:real] = torch.rand(real, rows.shape[-1], generator=generator)
    ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    positions[:real] = torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=-1)
    return rows, positions, real // GEMMA4_POOLING**2


def _audio_clip(seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    generator = torch.Generator().manual_seed(1000 + seed)
    features = torch.randn(AUDIO_FRAMES, GEMMA4_MEL_BINS, generator=generator)
    mask = padded_mask(AUDIO_FRAMES, real_length(AUDIO_FRAMES, seed), torch.bool)
    return features, mask, int(mask[::2][::2].sum())  # the processor's arithmetic: two stride-2 subsamplings


def build_gemma4_inputs(config, segments: list, item_seeds: list[int]) -> dict:
    ids: list[int] = []
    types: list[int] = []
    images, videos, clips = [], [], []
    for segment, seed in with_seeds(segments, item_seeds):
        if seed is None:
            ids += segment
            types += [0] * len(segment)
        elif segment == AUDIO:
            features, mask, tokens = _audio_clip(seed)
            clips.append((features, mask))
            ids += audio_run(tokens)
            types += [0, *[3] * tokens, 0]
        else:
            is_image = segment == IMAGE
            frames = 1 if is_image else FRAMES_PER_VIDEO
            placeholder, token_type = (TINY_IMAGE_TOKEN_ID, 1) if is_image else (TINY_VIDEO_TOKEN_ID, 2)
            pieces = [_patch_rows(seed * 10 + frame, GRIDS[seed % 7 % 4]) for frame in range(frames)]
            for frame, (_, _, tokens) in enumerate(pieces):
                if not is_image:  # the frame's timestamp
                    ids.append(90 + frame)
                    types.append(0)
                ids += [TINY_BOI_TOKEN_ID, *[placeholder] * tokens, TINY_EOI_TOKEN_ID]
                types += [0, *[token_type] * tokens, 0]
            (images if is_image else videos).append(pieces)
    inputs = {"input_ids": torch.tensor([ids]), "mm_token_type_ids": torch.tensor([types])}
    if images:
        inputs["pixel_values"] = torch.stack([piece[0][0] for piece in images])
        inputs["image_position_ids"] = torch.stack([piece[0][1] for piece in images])
    if videos:
        inputs["pixel_values_videos"] = torch.stack([frame[0] for video in videos for frame in video])
        inputs["video_position_ids"] = torch.stack([frame[1] for video in videos for frame in video])
        inputs["num_frames_per_video"] = torch.tensor([len(video) for video in videos])
    return add_clips(inputs, clips, "input_features", "input_features_mask")


register(
    FamilyCase(
        "gemma4",
        build_gemma4_inputs,
        unread_inputs=frozenset({"per_layer_inputs"}),
        per_token_keys=("mm_token_type_ids",),
        pixel_keys=(
            "pixel_values",
            "image_position_ids",
            "pixel_values_videos",
            "video_position_ids",
            "num_frames_per_video",
            "input_features",
            "input_features_mask",
        ),
    )
)


def _qwen_omni_clip(seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    # `(mel_bins, frames)` features and the mask of the real frames; the processor's count of audio placeholders
    generator = torch.Generator().manual_seed(2000 + seed)
    features = torch.randn(QWEN_OMNI_MEL_BINS, AUDIO_FRAMES, generator=generator)
    real = real_length(AUDIO_FRAMES, seed)
    return features, padded_mask(AUDIO_FRAMES, real), ((real - 1) // 2 + 1 - 2) // 2 + 1


def build_qwen_omni_inputs(config, segments: list, item_seeds: list[int], clip_of=_qwen_omni_clip) -> dict:
    """Qwen2.5-Omni thinker prompts: images and videos as Qwen2.5-VL's, an audio clip `<|audio_bos|>`, its
    placeholders, `<|audio_eos|>`; each video one second per temporal patch or two (seed parity). `clip_of(seed)`
    gives a clip's features, mask and placeholder count (the Qwen3-Omni thinker's tower counts otherwise)."""
    visual_segments, visual_seeds, clips = split_clips(segments, item_seeds, clip_of)
    ids, _, pixel_inputs, video_seeds = grid_prompt(
        visual_segments,
        visual_seeds,
        lambda seed: IMAGE_GRIDS[seed % len(IMAGE_GRIDS)],
        lambda medium, grid: (
            [VISION_START, *[TINY_IMAGE_TOKEN_ID if medium == IMAGE else TINY_VIDEO_TOKEN_ID] * merged_tokens(grid)]
            + [VISION_END],
            [],
        ),
    )
    prompt = splice_clips(ids, clips, lambda clip: audio_run(clip[2], QWEN_OMNI_AUDIO_START, QWEN_OMNI_AUDIO_END))
    # Upstream's forward numbers tokens with multimodal rope only when given a mask (without one, 1D positions):
    # the processor always returns one
    inputs = {"input_ids": torch.tensor([prompt]), "attention_mask": torch.ones(1, len(prompt), dtype=torch.long)}
    inputs.update(pixel_inputs)
    if video_seeds:
        inputs["video_second_per_grid"] = torch.tensor([1.0 + (seed % 2) for seed in video_seeds])
    return add_clips(inputs, clips, "input_features", "feature_attention_mask")


# The Qwen-Omni thinkers' processor outputs besides `input_ids` (the Qwen3-Omni thinker's case takes them too)
QWEN_OMNI_PIXEL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "pixel_values_videos",
    "video_grid_thw",
    "video_second_per_grid",
    "input_features",
    "feature_attention_mask",
)
register(
    FamilyCase(
        "qwen2_5_omni_thinker",
        build_qwen_omni_inputs,
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


# The Qwen3-Omni thinker: the Qwen2.5-Omni thinker's prompts (above), with its own clips.
#
# Its processor counts a clip's placeholders as its tower subsamples it: 13 per window of `2 * n_window` (100) frames,
# three stride-2 steps over the rest. Its tower pads every window of a call's clips to the longest one and its
# convolutions read that padding, so clips shorter than a window change each other's features upstream (an upstream
# batch effect, matched and checked in `tests/scenarios/test_audio_qwen3_omni.py`). The suite's clips are a second or
# more, as real ones are: 140 frames, of which 140, 134, 128 or 122 are real (one full window and a padded one), 18, 18,
# 17 or 16 placeholders.
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
