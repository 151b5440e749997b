"""`use_audio_in_video=True` on the Qwen-Omni thinkers: a video and its audio track interleaved in one block.

The processor writes a video whose audio it loads as `<vision_start><audio_start>`, the video's and the track's
placeholders interleaved in time, `<audio_end><vision_end>`
(`support.families.cases_audio_frames.build_audio_in_video_inputs` follows each family's processor). The video and its track are two items, each several runs; every logit is compared
with the plain transformers class (one uncached forward of the whole prompt, with `use_audio_in_video=True`), and
encoder runs are counted on the model's own `get_<modality>_features`.
"""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.families.cases_audio_frames import VIDEO_WITH_AUDIO, build_audio_in_video_inputs
from support.references import assert_close, generate_logits, uncached_logits
from support.registry import FAMILY_CASES
from support.traits import families_with, forward_takes
from vlmprep import PrefixCache
from vlmprep.testing import AUDIO, IMAGE, TINY_AUDIO_TOKEN_ID, TINY_VIDEO_TOKEN_ID, VIDEO, VisionRunCounter

# The families whose processor interleaves a video with its audio track (`use_audio_in_video=True`)
FAMILIES = families_with(forward_takes("use_audio_in_video"))
SYSTEM = [2, *range(10, 16)]
# Seed 1: a video of 2 temporal patches 2 seconds apart (2 placeholders each) and its 34-real-frame track
TURN = [SYSTEM, VIDEO_WITH_AUDIO, [30], AUDIO, [31, 32]]


def _inputs(model, segments: list, seeds: list[int]) -> dict:
    return build_audio_in_video_inputs(model.config, segments, seeds)


def _upstream_steps(upstream, inputs: dict, answer: torch.Tensor) -> torch.Tensor:
    # Logits at the prompt's last position and at each answer token but the last: one uncached forward
    ids = torch.cat([inputs["input_ids"], answer[None, :-1]], dim=-1)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        logits = upstream(**{**inputs, "input_ids": ids, "attention_mask": mask}, use_cache=False).logits
    return logits[0, inputs["input_ids"].shape[-1] - 1 :]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_block_interleaves_both_items(family):
    upstream, _ = model_pair(family)
    ids = _inputs(upstream, TURN, [1, 2])["input_ids"][0].tolist()
    block = ids[len(SYSTEM) + 2 : ids.index(upstream.config.audio_start_token_id, len(SYSTEM) + 2)]
    kinds = [token for token in block if token in (TINY_VIDEO_TOKEN_ID, TINY_AUDIO_TOKEN_ID)]
    changes = sum(1 for left, right in zip(kinds, kinds[1:], strict=False) if left != right)
    assert changes >= 2, f"video, then audio, then video again: {kinds}"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("chunk_size", [None, 3])
def test_audio_in_video_is_exact_and_each_item_encoded_once(family, chunk_size):
    upstream, ours = model_pair(family)
    inputs = _inputs(ours, [SYSTEM, IMAGE, *TURN[1:]], [0, 1, 2])
    with VisionRunCounter(ours) as runs:
        sequences, logits = generate_logits(ours, inputs, max_new_tokens=3, prefill_chunk_size=chunk_size)
    answer = sequences[0, inputs["input_ids"].shape[-1] :]
    for step, expected in zip(logits, _upstream_steps(upstream, inputs, answer), strict=True):
        assert_close(step[0], expected)
    assert sorted(runs.batch_sizes) == [1, 1, 2], "one image, one video, the track and the other clip together"


@pytest.mark.parametrize("family", FAMILIES)
def test_another_track_changes_upstream_logits_and_the_drop_in_is_exact(family):
    # The tiny models hear the track: the same video with other audio features moves upstream's last logits
    upstream, ours = model_pair(family)
    inputs = _inputs(ours, TURN[:3], [1])
    other = dict(
        inputs, input_features=torch.randn(inputs["input_features"].shape, generator=torch.Generator().manual_seed(5))
    )
    logits = [uncached_logits(upstream, prompt) for prompt in (inputs, other)]
    assert (logits[0] - logits[1]).abs().max() > 1e-3
    for prompt, expected in zip((inputs, other), logits, strict=True):
        _, steps = generate_logits(ours, prompt, max_new_tokens=1, prefill_chunk_size=4)
        assert_close(steps[0], expected)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_later_turn_resumes_from_the_prefix_store_without_encoding(family):
    upstream, ours = model_pair(family)
    store = PrefixCache(max_bytes=2**26)
    first = _inputs(ours, TURN, [1, 2])
    later = _inputs(ours, [*TURN, [33], VIDEO_WITH_AUDIO, [34]], [1, 2, 4])
    generate_logits(ours, first, max_new_tokens=1, prefix_cache=store)
    with VisionRunCounter(ours) as runs:
        sequences, logits = generate_logits(ours, later, max_new_tokens=2, prefix_cache=store)
    assert sorted(runs.batch_sizes) == [1, 1], "only the new video and its track"
    answer = sequences[0, later["input_ids"].shape[-1] :]
    for step, expected in zip(logits, _upstream_steps(upstream, later, answer), strict=True):
        assert_close(step[0], expected)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_cache_ending_inside_the_block_resumes_exactly(family):
    upstream, ours = model_pair(family)
    inputs = _inputs(ours, TURN, [1, 2])
    expected = uncached_logits(upstream, inputs)
    for cut in (len(SYSTEM) + 4, len(SYSTEM) + 7):  # inside the interleaved runs: causal, the rest is fed
        with torch.no_grad():  # upstream's prefill of the whole prompt, cut inside the block
            cache = upstream(**inputs, use_cache=True).cache
        cache.crop(cut - cache.get_seq_length())
        _, logits = generate_logits(ours, inputs, max_new_tokens=1, cache=cache)
        assert_close(logits[0], expected)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_video_without_its_track_is_refused(family):
    _, ours = model_pair(family)
    plain = FAMILY_CASES[family].build_inputs(ours.config, [SYSTEM, VIDEO, [30]], [1])
    with pytest.raises(ValueError, match="every video comes with its audio track"):
        ours.generate(**plain, use_audio_in_video=True, max_new_tokens=1)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_left_padded_batch_numbers_the_clips_in_prompt_order(family):
    # Row 0: a video with its track; row 1: a clip, a video with its track, an image. The clips are numbered over the
    # rows in order (row 0's track, row 1's clip, row 1's track), as upstream's placement and positions number them.
    upstream, ours = model_pair(family)
    rows = [
        _inputs(ours, [[2, 10], VIDEO_WITH_AUDIO, [30]], [1]),
        _inputs(ours, [[2, 10, 11], AUDIO, [5], VIDEO_WITH_AUDIO, [31, 32], IMAGE, [3]], [2, 0, 3]),
    ]
    length = max(row["input_ids"].shape[-1] for row in rows)
    inputs = {"use_audio_in_video": True, "pixel_values": rows[1]["pixel_values"]}
    inputs["image_grid_thw"] = rows[1]["image_grid_thw"]
    for key in ("input_ids", "attention_mask"):
        inputs[key] = torch.cat([torch.nn.functional.pad(row[key], (length - row[key].shape[-1], 0)) for row in rows])
    for key in (
        "input_features",
        "feature_attention_mask",
        "pixel_values_videos",
        "video_grid_thw",
        "video_second_per_grid",
    ):
        inputs[key] = torch.cat([row[key] for row in rows])
    _, logits = generate_logits(ours, inputs, max_new_tokens=1, prefill_chunk_size=4)
    assert_close(logits[0], uncached_logits(upstream, inputs))
