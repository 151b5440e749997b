"""Audio clips in the engine: requests with clips (alone, after an image, before a video, one clip in two requests)
answer exactly as the plain class's `generate` does, with a budget shorter than the prompts (clips split across
steps)."""

from __future__ import annotations

import pytest
import torch
import transformers
from cb_models import (
    assert_engine_matches_references,
    cb_pair,
    engine_config,
    greedy,
)

import vlmprep
from support.families.cases_audio_frames import qwen3_omni_clip
from support.registry import FAMILY_CASES
from support.traits import families_with, refused_by_engine, takes
from vlmprep.testing import AUDIO, IMAGE, TINY_AUDIO_TOKEN_ID, VIDEO, tiny_model
from vlmprep.testing.configs.audio_frames import QWEN_OMNI_AUDIO_END, QWEN_OMNI_AUDIO_START, tiny_gemma4_config

# The families taking audio and videos that the engine runs, and Gemma 4 with one head dimension for every layer
# (`_engine_pair`)
AUDIO_FAMILIES = families_with(
    takes("audio"), takes("video"), lambda family: not refused_by_engine(family) or family == "gemma4"
)
_ONE_HEAD_DIM_GEMMA4: list = []


def _engine_pair(family: str):
    if family != "gemma4":
        return cb_pair(family)
    # The suite's Gemma 4 gives its full-attention layer its own head dimension, as every real one does, which
    # transformers' paged cache cannot hold (refused: test below). With one head dimension it runs in the engine.
    if not _ONE_HEAD_DIM_GEMMA4:
        upstream = tiny_model(transformers.Gemma4ForConditionalGeneration, tiny_gemma4_config(global_head_dim=16))
        ours = vlmprep.Gemma4ForConditionalGeneration(upstream.config).eval()
        ours.load_state_dict(upstream.state_dict())
        _ONE_HEAD_DIM_GEMMA4.extend((upstream.eval(), ours))
    return tuple(_ONE_HEAD_DIM_GEMMA4)


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_audio_requests_in_the_engine(family):
    upstream, ours = _engine_pair(family)
    build, config = FAMILY_CASES[family].build_inputs, upstream.config
    requests = [
        build(config, [[3, 4, 5], AUDIO, [6, 7]], [1]),
        [8, 9, 10, 11],
        build(config, [[3], IMAGE, [12], AUDIO, [13, 14]], [2, 3]),
        build(config, [[15, 16], AUDIO, [17], VIDEO, [18]], [1, 4]),  # a clip, then a video (runs per frame)
    ]
    assert_engine_matches_references(upstream, ours, requests, 4, max_batch_tokens=8)


def test_gemma4_with_its_own_full_attention_head_dim_is_refused():
    # Plain transformers' engine fails on it too, with a bare `AmbiguousGlobalPerLayerAttributeError`
    upstream, ours = cb_pair("gemma4")
    with pytest.raises(ValueError, match=r"layers differ in \['head_dim'\].*paged cache does not hold"):
        ours.generate_batch([[3, 4, 5]], generation_config=greedy(2), progress_bar=False)


def test_qwen3_omni_short_clips_and_a_video_between_integer_positions():
    # Clips under a window: upstream pads a request's windows to its own longest one; the engine encodes requests
    # together only under the same padding (both clips come padded to 40 frames, of which 22 and 40 are real). A video
    # of 0.75 s per temporal patch has its second patch at rope position 1.5, which the engine keeps as a float.
    upstream, ours = cb_pair("qwen3_omni_moe_thinker")
    requests = []
    for seed in (3, 0):
        features, mask, tokens = qwen3_omni_clip(seed, frames=40)
        ids = [3, QWEN_OMNI_AUDIO_START, *[TINY_AUDIO_TOKEN_ID] * tokens, QWEN_OMNI_AUDIO_END, 4, 5]
        requests.append({"input_ids": ids, "input_features": features[None], "feature_attention_mask": mask[None]})
    build = FAMILY_CASES["qwen3_omni_moe_thinker"].build_inputs
    requests.append(
        {**build(upstream.config, [[15], VIDEO, [17]], [1]), "video_second_per_grid": torch.tensor([0.75])}
    )
    assert_engine_matches_references(upstream, ours, requests, 3, max_batch_tokens=8)


def test_qwen2_5_omni_request_with_audio_in_video_is_refused():
    # The engine carries no `use_audio_in_video` (the Qwen3-Omni thinker's requests take the same keys)
    upstream, ours = cb_pair("qwen2_5_omni_thinker")
    request = FAMILY_CASES["qwen2_5_omni_thinker"].build_inputs(upstream.config, [[3], AUDIO, [4]], [1])
    request["use_audio_in_video"] = True  # an option the engine does not carry: named in the refusal
    outputs = ours.generate_batch(
        [request],
        generation_config=greedy(2),
        continuous_batching_config=engine_config(max_batch_tokens=8),
        progress_bar=False,
    )
    (output,) = outputs.values()
    assert "Unknown request inputs ['use_audio_in_video']" in output.error
