"""Audio clips of the omni families of issue 26 (Muse Spark's and Apertus 1.5's raw waveforms): `test_audio.py`'s
checks, on these families, and their own clear failures.

Every logit is compared with the plain transformers class holding the same weights (one uncached forward of the whole
prompt); encoder runs are counted with `VisionRunCounter`. The clips (`support.families.cases_omnib`) are 40 samples,
of which the first 40, 34, 28 or 22 are real (by seed): the last audio token of a short clip reads padding.
"""

from __future__ import annotations

import pytest
import torch
from test_audio import SYSTEM
from test_audio import test_a_cache_ending_inside_an_audio_run_resumes_exactly as _cache_inside_run
from test_audio import test_a_clip_hits_the_encoder_cache_alone_or_batched_with_a_longer_clip as _alone_or_batched
from test_audio import test_chunks_cutting_audio_runs_are_exact as _chunks
from test_audio import test_five_turn_chat_with_image_and_audio_feeds_only_new_tokens as _five_turns
from test_audio import test_two_clips_behind_identical_ids_never_share_prefix_kv as _identical_ids

from conftest import model_pair
from support.references import Prompt, assert_close, generate_logits, uncached_logits
from vlmprep.testing import AUDIO

WAVEFORM_FAMILIES = ["apertus1p5", "muse_spark"]
AUDIO_MASK_KEYS = {"apertus1p5": "padding_mask", "muse_spark": "input_values_mask"}


@pytest.mark.parametrize("family", WAVEFORM_FAMILIES)
def test_five_turn_chat_with_image_and_audio_feeds_only_new_tokens(family):
    _five_turns(family)


@pytest.mark.parametrize("family", WAVEFORM_FAMILIES)
@pytest.mark.parametrize("chunk_size", [3, 5, 8])
def test_chunks_cutting_audio_runs_are_exact(family, chunk_size):
    _chunks(family, chunk_size)


@pytest.mark.parametrize("family", WAVEFORM_FAMILIES)
def test_a_clip_hits_the_encoder_cache_alone_or_batched_with_a_longer_clip(family):
    _alone_or_batched(family)


@pytest.mark.parametrize("family", WAVEFORM_FAMILIES)
def test_a_cache_ending_inside_an_audio_run_resumes_exactly(family):
    _cache_inside_run(family)


@pytest.mark.parametrize("family", WAVEFORM_FAMILIES)
def test_two_clips_behind_identical_ids_never_share_prefix_kv(family):
    _identical_ids(family)


@pytest.mark.parametrize("family", WAVEFORM_FAMILIES)
def test_bad_waveform_inputs_raise_clear_errors(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, AUDIO, [30]], image_seeds=[1])  # 34 real samples of 40
    mask_key = AUDIO_MASK_KEYS[family]
    without_audio = {k: v for k, v in prompt.inputs().items() if k not in ("input_values", mask_key)}
    with pytest.raises(ValueError, match="no pixel inputs were passed"):
        ours.generate(**without_audio, max_new_tokens=1)
    two_clips = dict(prompt.inputs())
    for key in ("input_values", mask_key):
        two_clips[key] = torch.cat([two_clips[key], two_clips[key]])
    with pytest.raises(ValueError, match=r"2 audio\(s\) were passed but the prompt has 1 audio placeholder run"):
        ours.generate(**two_clips, max_new_tokens=1)
    values = prompt.inputs()["input_values"]
    stereo = {**prompt.inputs(), "input_values": values.unsqueeze(1).expand(-1, 2, *values.shape[1:])}
    with pytest.raises(ValueError, match="mono waveforms"):
        ours.generate(**stereo, max_new_tokens=1)
    wrong_mask = {**prompt.inputs(), mask_key: prompt.inputs()[mask_key][:, :20]}
    with pytest.raises(ValueError, match="one mask entry per sample"):
        ours.generate(**wrong_mask, max_new_tokens=1)
    shorter_mask = dict(prompt.inputs())
    shorter_mask[mask_key] = shorter_mask[mask_key].clone()
    shorter_mask[mask_key][:, 20:] = 0  # the clip's run is longer than its real samples give
    with pytest.raises(ValueError, match="more audio placeholder tokens than"):
        ours.generate(**shorter_mask, max_new_tokens=1)
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1)  # the model is still exact afterwards
    assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))


def test_muse_spark_refuses_waveforms_of_part_of_a_token():
    _, ours = model_pair("muse_spark")
    inputs = Prompt(ours.config, [SYSTEM, AUDIO, [30]], image_seeds=[1]).inputs()
    not_whole_tokens = {**inputs, "input_values": inputs["input_values"][:, :38]}
    not_whole_tokens["input_values_mask"] = inputs["input_values_mask"][:, :38]
    with pytest.raises(ValueError, match="multiple of 4 samples"):
        ours.generate(**not_whole_tokens, max_new_tokens=1)


def test_apertus1p5_refuses_clips_without_a_right_padded_mask():
    _, ours = model_pair("apertus1p5")
    inputs = Prompt(ours.config, [SYSTEM, AUDIO, [30]], image_seeds=[0]).inputs()  # all 40 samples real
    without_mask = {k: v for k, v in inputs.items() if k != "padding_mask"}
    with pytest.raises(ValueError, match="Pass the `padding_mask` the feature extractor returned"):
        ours.generate(**without_mask, max_new_tokens=1)
    left_padded = {**inputs, "padding_mask": inputs["padding_mask"].clone()}
    left_padded["padding_mask"][:, :2] = 0
    with pytest.raises(ValueError, match="real samples first"):
        ours.generate(**left_padded, max_new_tokens=1)


def test_muse_spark_reads_a_clip_without_its_mask_whole_as_upstream_does():
    # Without `input_values_mask` upstream reads every sample as real: a full-length clip then needs no mask.
    upstream, ours = model_pair("muse_spark")
    prompt = Prompt(ours.config, [SYSTEM, AUDIO, [30, 31]], image_seeds=[0])  # all 40 samples real: 10 tokens
    inputs = {k: v for k, v in prompt.inputs().items() if k != "input_values_mask"}
    _, logits = generate_logits(ours, inputs, max_new_tokens=1, prefill_chunk_size=5)
    assert_close(logits[0], uncached_logits(upstream, inputs))
