"""Videos next to images: each video encoded once, exact against transformers, also from a cache ending in a video.

LLaVA-OneVision and LLaVA-NeXT-Video give a video one placeholder run (tests/support/families/cases_llava_video.py); the
Qwen-like families one run per frame, told apart from images by `mm_token_type_ids`; GLM-4V, GLM-4.5V and GLM-4.6V
find image and video placeholders by one token id, so (as upstream) one forward holds only one of them.
"""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.caller_caches import cache_of, cropped_cache
from support.references import (
    SYSTEM,
    USER,
    Prompt,
    assert_close,
    assert_same_steps,
    encoder_runs,
    generate_batch_matching_upstream,
    generate_logits,
    generate_new_image_turn,
    reference_next_logits,
    uncached_logits,
    with_encoder_cache,
)
from support.traits import (
    compressed_videos,
    families_with,
    images_and_videos_in_one_prompt,
    qwen_like_prompts,
    videos_as_one_run,
    videos_behind_image_placeholders,
)
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, VIDEO, VisionRunCounter

LLAVA_VIDEO_FAMILIES = families_with(videos_as_one_run)
# The Qwen-like families and VideoLLaMA3: one placeholder run per frame
FRAME_RUN_FAMILIES = families_with(lambda family: qwen_like_prompts(family) or compressed_videos(family))


def video_positions(prompt: Prompt) -> list[int]:
    """Positions of the video's placeholder tokens: by token type where the family has them, else by token id."""
    token_types = prompt.full_inputs.get("mm_token_type_ids")
    if token_types is not None:
        return (token_types[0] == 2).nonzero().flatten().tolist()
    return (prompt.input_ids[0] == prompt.case.make_config().video_token_id).nonzero().flatten().tolist()


# Prompts with one video: (segments, image seeds, items per vision call). One call per modality, shared by the beams;
# the Qwen-like families batch the two images into one call, then encode the video.
LLAVA_VIDEO_PROMPTS = {
    "video": ([SYSTEM, VIDEO, USER], [0], [1]),
    "image_and_video": ([SYSTEM, IMAGE, [30], VIDEO, USER], [0, 1], [1, 1]),
}
QWEN_VIDEO_PROMPTS = {"images_and_video": ([SYSTEM, IMAGE, [30], VIDEO, [31], IMAGE, [32]], [0, 1, 2], [2, 1])}
VIDEO_PROMPT_PARAMS = [
    pytest.param(family, *prompt, id=f"{family}-{name}")
    for families, prompts in (
        (LLAVA_VIDEO_FAMILIES, LLAVA_VIDEO_PROMPTS),
        (FRAME_RUN_FAMILIES, QWEN_VIDEO_PROMPTS),
    )
    for family in families
    for name, prompt in prompts.items()
]


def count_videos(prompt: Prompt) -> int:
    grids = prompt.full_inputs.get("video_grid_thw")
    return len(grids) if grids is not None else int(prompt.full_inputs["pixel_values_videos"].shape[0])


@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize(("family", "segments", "seeds", "expected_runs"), VIDEO_PROMPT_PARAMS)
def test_video_prompts_match_transformers(family, segments, seeds, expected_runs, num_beams):
    if compressed_videos(family) and num_beams > 1:
        pytest.skip(
            "upstream's VideoLLaMA3 beam search fails on a video (`torch.cat(): expected a non-empty list`): no "
            "reference; the drop-in's beams share the greedy path's features"
        )
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, segments, image_seeds=seeds)
    assert count_videos(prompt) == 1
    kwargs = {"max_new_tokens": 3, "num_beams": num_beams}
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs(), **kwargs)
    with encoder_runs(ours) as runs:
        sequences, logits = generate_logits(ours, prompt.inputs(), **kwargs)
    assert torch.equal(sequences, expected_sequences)
    assert_same_steps(logits, expected_logits)
    assert runs.batch_sizes == expected_runs


@pytest.mark.parametrize("family", LLAVA_VIDEO_FAMILIES)
def test_adjacent_videos_in_one_run_match_transformers(family):
    """Two videos back to back make one placeholder run: split by each video's token count (upstream scatters the
    features in order), both encoded in one tower run; exact in chunks that cut the run, and after a cache ending in
    the first video."""
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, VIDEO, VIDEO, USER], image_seeds=[0, 1])
    assert count_videos(prompt) == 2
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=3)
    with encoder_runs(ours) as runs:
        sequences, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=3)
    assert torch.equal(sequences, expected_sequences)
    assert_same_steps(logits, expected_logits)
    assert runs.batch_sizes == [2]
    first_video_end = video_positions(prompt)[0] + len(video_positions(prompt)) // 2
    for kwargs in (
        {"prefill_chunk_size": 7},
        {"cache": cropped_cache(upstream, prompt.inputs(), first_video_end - 2)},
    ):
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=3, **kwargs)
        assert_same_steps(logits, expected_logits)


@pytest.mark.parametrize("family", FRAME_RUN_FAMILIES)
def test_left_padded_batch_of_images_and_videos_matches_solo_runs(family):
    """Each row equals transformers on that row's prompt alone (uncached forwards); one encoder run per modality."""
    upstream, ours = model_pair(family)
    one = Prompt(ours.config, [SYSTEM, VIDEO, USER], image_seeds=[1])
    two = Prompt(ours.config, [[2, 50], IMAGE, [51], VIDEO, [52], IMAGE, [53]], image_seeds=[2, 3, 4])
    with encoder_runs(ours) as runs:  # the batch's patch and grid rows are in prompt order
        generate_batch_matching_upstream(upstream, ours, [one, two])
    assert runs.batch_sizes == [2, 2]


@pytest.mark.parametrize("family", families_with(images_and_videos_in_one_prompt))
def test_new_image_after_cached_video_turn(family):
    """A cached conversation holds a video and gets a new image: only the image is encoded; upstream cannot do it."""
    upstream, ours = model_pair(family)
    turn_1 = [SYSTEM, VIDEO, USER]
    runs = generate_new_image_turn(upstream, ours, turn_1, [5, 6], cache_of, encoder_runs)
    assert runs.batch_sizes == [1]  # the new image; the cached video is not encoded again

    conversation = Prompt(ours.config, [*turn_1, [40, 41], IMAGE, [42]], image_seeds=[5, 6])
    cache = cache_of(upstream, Prompt(ours.config, turn_1, image_seeds=[5]).inputs())
    with pytest.raises(ValueError, match="do not match"):
        upstream.generate(**conversation.inputs(), cache=cache, max_new_tokens=1)


@pytest.mark.parametrize(
    "family",
    families_with(lambda family: images_and_videos_in_one_prompt(family) or videos_behind_image_placeholders(family)),
)
def test_cache_ending_anywhere_in_a_video(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [[2, 10], VIDEO, [11, 12]], image_seeds=[0])
    _, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    positions = video_positions(prompt)
    assert len(positions) >= 4
    for cached in range(positions[0], positions[-1] + 2):  # before, inside and just after the video
        for chunk_size in (None, 3):
            cache = cropped_cache(upstream, prompt.inputs(), cached)
            _, logits = generate_logits(
                ours, prompt.inputs(), max_new_tokens=2, cache=cache, prefill_chunk_size=chunk_size
            )
            assert_same_steps(logits, expected_logits)


@pytest.mark.parametrize("family", families_with(compressed_videos))
def test_compressed_video_is_encoded_once_and_keyed_by_its_mask(family):
    """A video's kept rows are part of what it is: the same pixels with another compression mask are encoded again
    (exact), never served from the encoder cache or the prefix store; the same video in a later call runs no encoder
    and resumes from the stored prefix."""
    upstream, ours = model_pair(family)
    store = PrefixCache(block_size=4)
    with with_encoder_cache(ours):
        prompt = Prompt(ours.config, [SYSTEM, VIDEO, [30, 31]], image_seeds=[0])
        other_mask = prompt.inputs()
        other_mask["video_compression_mask"] = other_mask["video_compression_mask"].roll(1)
        assert other_mask["input_ids"].tolist() == prompt.inputs()["input_ids"].tolist()  # same placeholders
        with VisionRunCounter(ours) as runs:
            _, first = generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store)
            _, again = generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store)
            _, rolled = generate_logits(ours, other_mask, max_new_tokens=1, prefix_cache=store)
        assert runs.calls == 2  # the first call and the other mask; the second call resumes from the store
        for logits in (first, again):
            assert_close(logits[0], reference_next_logits(upstream, prompt))
        expected = uncached_logits(upstream, other_mask)
        assert_close(rolled[0], expected)
        assert not torch.allclose(expected, reference_next_logits(upstream, prompt))  # the mask matters upstream
