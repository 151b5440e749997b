"""LLaVA-OneVision and LLaVA-NeXT-Video with videos: each video is one placeholder run, encoded once.

The conformance suite runs the image scenarios; these add videos (built by `tests/families/cases_llava_video.py`):
prompts with a video, a cached conversation whose cache holds a video, chunked prefill and caches ending inside a
video, all exact against transformers.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from conftest import model_pair
from helpers import Prompt, assert_same_steps, cache_of, generate_logits
from vlmprep.testing import IMAGE, VisionRunCounter

FAMILIES = ["llava_onevision", "llava_next_video"]
VIDEO = "<video>"  # the video marker of tests/families/cases_llava_video.py
VIDEO_TOKEN_ID = 123
SYSTEM = [2, 10, 11, 12, 13, 14, 15, 16]
USER = [20, 21, 22]


@contextlib.contextmanager
def counting_encoder_runs(model):
    """Items per vision-encoder call, with the encoder cache off so every needed item is really encoded."""
    saved, model.encoder_cache = model.encoder_cache, None
    try:
        with VisionRunCounter(model) as runs:
            yield runs
    finally:
        model.encoder_cache = saved


@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize(
    ("segments", "seeds", "expected_runs"),
    [([SYSTEM, VIDEO, USER], [0], [1]), ([SYSTEM, IMAGE, [30], VIDEO, USER], [0, 1], [1, 1])],
    ids=["video", "image_and_video"],
)
@pytest.mark.parametrize("family", FAMILIES)
def test_video_prompts_match_transformers(family, segments, seeds, expected_runs, num_beams):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, segments, image_seeds=seeds)
    assert prompt.full_inputs["pixel_values_videos"].shape[0] == 1
    kwargs = {"max_new_tokens": 3, "num_beams": num_beams}
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs(), **kwargs)
    with counting_encoder_runs(ours) as runs:
        sequences, logits = generate_logits(ours, prompt.inputs(), **kwargs)
    assert torch.equal(sequences, expected_sequences)
    assert_same_steps(logits, expected_logits)
    assert runs.batch_sizes == expected_runs  # one call per modality, shared by the beams


@pytest.mark.parametrize("family", FAMILIES)
def test_new_image_after_cached_video_turn(family):
    """A cached conversation holds a video and gets a new image: only the image is encoded; upstream cannot do it."""
    upstream, ours = model_pair(family)
    turn_1 = [SYSTEM, VIDEO, USER]
    conversation = Prompt(ours.config, [*turn_1, [40, 41], IMAGE, [42]], image_seeds=[5, 6])
    turn_1_prompt = Prompt(ours.config, turn_1, image_seeds=[5])
    cache = cache_of(upstream, turn_1_prompt.inputs())
    with counting_encoder_runs(ours) as runs:
        _, logits = generate_logits(ours, conversation.inputs(), cache=cache)
    assert runs.batch_sizes == [1]  # the new image; the cached video is not encoded again
    _, expected_logits = generate_logits(upstream, conversation.inputs())
    assert_same_steps(logits, expected_logits)

    cache = cache_of(upstream, turn_1_prompt.inputs())
    with pytest.raises(ValueError, match="do not match"):
        upstream.generate(**conversation.inputs(), cache=cache, max_new_tokens=1)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_chunk_size_is_exact_with_a_video(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [[2, 10], VIDEO, [11, 12], IMAGE, [13]], image_seeds=[1, 2])
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    for chunk_size in range(1, prompt.length + 1):
        with counting_encoder_runs(ours) as runs:
            sequences, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2, prefill_chunk_size=chunk_size)
        assert torch.equal(sequences, expected_sequences), f"chunk size {chunk_size}"
        assert_same_steps(logits, expected_logits)
        assert runs.batch_sizes == [1, 1], f"chunk size {chunk_size}: {runs.batch_sizes}"


@pytest.mark.parametrize("family", FAMILIES)
def test_cache_ending_anywhere_in_a_video(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [[2, 10], VIDEO, [11, 12]], image_seeds=[0])
    _, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    video_positions = (prompt.input_ids[0] == VIDEO_TOKEN_ID).nonzero().flatten().tolist()
    assert len(video_positions) >= 4
    for cached in range(video_positions[0], video_positions[-1] + 2):  # before, inside and just after the video
        for chunk_size in (None, 3):
            cache = cache_of(upstream, prompt.inputs())
            cache.crop(cached - prompt.length)
            _, logits = generate_logits(
                ours, prompt.inputs(), max_new_tokens=2, cache=cache, prefill_chunk_size=chunk_size
            )
            assert_same_steps(logits, expected_logits)


@pytest.mark.parametrize("family", FAMILIES)
def test_video_placeholders_without_pixels_raise(family):
    _, ours = model_pair(family)
    inputs = Prompt(ours.config, [SYSTEM, VIDEO, USER], image_seeds=[0]).inputs(with_pixels=False)
    with pytest.raises(ValueError, match="video placeholder run"):
        ours.generate(**inputs, max_new_tokens=1)
