"""The Qwen3-Omni thinker's clips shorter than its audio tower's 100-frame window, exact as upstream encodes them.

Upstream's tower pads the windows of every clip of a call to the longest of them, and its strided convolutions read
that padding: a short clip's features differ alone and next to a longer clip (by about 1e-3 on the tiny model). The
drop-in pads each clip as upstream's forward of the whole prompt does, so it is exact in both cases, and a clip's
features (and the KV after it) are reused only under the same padding. The conformance suite's clips are a second
or longer (`support.families.cases_audio_frames`), where every call pads alike.
"""

from __future__ import annotations

import torch

from conftest import model_pair
from support.families.cases_audio_frames import qwen3_omni_clip
from support.references import Prompt, assert_close, generate_logits, uncached_logits
from vlmprep import PrefixCache
from vlmprep.testing import AUDIO, TINY_AUDIO_TOKEN_ID, VIDEO, VisionRunCounter
from vlmprep.testing.configs.audio_frames import QWEN_OMNI_AUDIO_END, QWEN_OMNI_AUDIO_START

SYSTEM = [2, *range(10, 16)]
SHORT_FRAMES = 40  # of which 40, 34, 28 or 22 are real (seed % 7 % 4)


def _prompt(seeds: list[int]) -> dict:
    # One clip per seed, each after two text tokens, as the processor writes them
    ids, clips = list(SYSTEM), []
    for position, seed in enumerate(seeds):
        features, mask, tokens = qwen3_omni_clip(seed, frames=SHORT_FRAMES)
        clips.append((features, mask))
        ids += [30 + position, QWEN_OMNI_AUDIO_START, *[TINY_AUDIO_TOKEN_ID] * tokens, QWEN_OMNI_AUDIO_END]
    ids += [40, 41]
    return {
        "input_ids": torch.tensor([ids]),
        "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        "input_features": torch.stack([clip[0] for clip in clips]),
        "feature_attention_mask": torch.stack([clip[1] for clip in clips]),
    }


def test_a_short_clip_next_to_a_longer_one_is_exact_as_upstream_pads_it():
    upstream, ours = model_pair("qwen3_omni_moe_thinker")
    short_alone, short_then_long = _prompt([3]), _prompt([3, 0])  # 22 real frames, then 40
    with torch.no_grad():
        alone = upstream.model.get_audio_features(
            short_alone["input_features"], short_alone["feature_attention_mask"]
        ).last_hidden_state
        batched = upstream.model.get_audio_features(
            short_then_long["input_features"], short_then_long["feature_attention_mask"]
        ).last_hidden_state
    assert (batched[: alone.shape[0]] - alone).abs().max() > 1e-5, "upstream's padding must matter here"
    store = PrefixCache(max_bytes=2**26)
    for inputs, encoded in ((short_alone, [1]), (short_then_long, [2]), (short_then_long, [])):
        with VisionRunCounter(ours) as runs:
            _, logits = generate_logits(ours, inputs, max_new_tokens=1, prefix_cache=store)
        assert_close(logits[0], uncached_logits(upstream, inputs))
        # The short clip's features alone do not serve it next to the longer clip: both are encoded, once; the
        # same prompt again resumes from the store
        assert runs.batch_sizes == encoded, runs.batch_sizes


def test_chunks_cutting_short_clips_are_exact():
    upstream, ours = model_pair("qwen3_omni_moe_thinker")
    inputs = _prompt([2, 1])  # 28 and 34 real frames
    for chunk_size in (2, 3):
        _, logits = generate_logits(ours, inputs, max_new_tokens=1, prefill_chunk_size=chunk_size)
        assert_close(logits[0], uncached_logits(upstream, inputs))


def test_a_video_timed_between_integer_positions_is_exact():
    # 0.75 s per temporal patch at 2 position ids a second: the second patch at 1.5. Upstream's rope takes float
    # positions (a processor sampling 3 frames a second gives such times): they are not rounded
    upstream, ours = model_pair("qwen3_omni_moe_thinker")
    prompt = Prompt(ours.config, [SYSTEM, VIDEO, [30], AUDIO, [31, 32]], image_seeds=[1, 2])
    inputs = dict(prompt.inputs(), video_second_per_grid=torch.tensor([0.75]))
    for chunk_size in (None, 3):
        sequences, logits = generate_logits(ours, inputs, max_new_tokens=2, prefill_chunk_size=chunk_size)
        answer = sequences[0, prompt.length :]
        ids = torch.cat([inputs["input_ids"], answer[None, :1]], dim=-1)
        with torch.no_grad():
            expected = upstream(**dict(inputs, input_ids=ids, attention_mask=torch.ones_like(ids))).logits[0, -2:]
        for step, step_expected in zip(logits, expected, strict=True):
            assert_close(step[0], step_expected)
