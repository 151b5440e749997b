"""Audio clips of the omni families of issue 26 (Muse Spark's and Apertus 1.5's raw waveforms, Dots 3 Note's log-mel
chunks): their own checks and clear failures (`test_audio.py` runs its checks on every family that takes audio).

Every logit is compared with the plain transformers class holding the same weights (one uncached forward of the whole
prompt); encoder runs are counted with `VisionRunCounter`. The waveforms (`support.families.cases_audio_samples`) are 40
samples, of which the first 40, 34, 28 or 22 are real (by seed): the last audio token of a short clip reads padding.
A Dots 3 Note clip is one chunk of 320, 272, 224 or 176 samples (by seed), or (seed modulo 7 modulo 4 == 2) two
chunks in one run, each chunk an item.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from test_audio import SYSTEM, TEXT_ANSWERS

from conftest import model_pair
from support.caller_caches import cropped_cache
from support.generation_checks import assert_bad_clips_refused_then_exact
from support.references import Prompt, assert_close, generate_logits, uncached_logits
from support.traits import audio_as, audio_mask_key, families_with
from vlmprep import Dots3NoteForConditionalGeneration
from vlmprep.testing import AUDIO, VisionRunCounter, tiny_model
from vlmprep.testing.configs import tiny_dots3_note_config


@pytest.mark.parametrize("family", families_with(audio_as("input_values")))
def test_bad_waveform_inputs_raise_clear_errors(family):
    upstream, ours = model_pair(family)
    inputs = Prompt(ours.config, [SYSTEM, AUDIO, [30]], image_seeds=[1]).inputs()  # 34 real samples of 40
    mask_key = audio_mask_key(family)
    values = inputs["input_values"]
    more = [
        ({**inputs, "input_values": values.unsqueeze(1).expand(-1, 2, *values.shape[1:])}, "mono waveforms"),
        ({**inputs, mask_key: inputs[mask_key][:, :20]}, "one mask entry per sample"),
    ]
    assert_bad_clips_refused_then_exact(upstream, ours, inputs, "input_values", mask_key, more)


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


def test_dots3_note_chunks_of_one_clip_are_items_of_one_run():
    upstream, ours = model_pair("dots3_note")
    prompt = Prompt(ours.config, [SYSTEM, AUDIO, [30], AUDIO, [31, 32]], image_seeds=[2, 0])  # 2 chunks, then 1
    inputs = prompt.inputs()
    assert inputs["input_features"].shape[0] == 3
    with VisionRunCounter(ours) as runs:
        _, logits = generate_logits(ours, inputs, max_new_tokens=1, prefill_chunk_size=4)
    assert_close(logits[0], uncached_logits(upstream, inputs))
    assert runs.batch_sizes == [3], "the three chunks in one call"
    cut = len(SYSTEM) + 12  # inside the first clip's second chunk
    with VisionRunCounter(ours) as runs:
        _, logits = generate_logits(ours, inputs, max_new_tokens=1, cache=cropped_cache(upstream, inputs, cut))
    assert_close(logits[0], uncached_logits(upstream, inputs))
    assert runs.batch_sizes == [], "every chunk is in the encoder cache"


def test_dots3_note_bad_audio_inputs_raise_clear_errors():
    upstream, ours = model_pair("dots3_note")
    prompt = Prompt(ours.config, [SYSTEM, AUDIO, [30]], image_seeds=[1])
    inputs = prompt.inputs()
    without_lengths = {k: v for k, v in inputs.items() if k != "chunk_sample_lengths"}
    with pytest.raises(ValueError, match="Pass the `chunk_sample_lengths` the feature extractor returned"):
        ours.generate(**without_lengths, max_new_tokens=1)
    with pytest.raises(ValueError, match="mel bins"):
        ours.generate(**{**inputs, "input_features": inputs["input_features"][:, :4]}, max_new_tokens=1)
    with pytest.raises(ValueError, match="frames but `chunk_sample_lengths` needs"):
        ours.generate(**{**inputs, "input_features": inputs["input_features"][..., :40]}, max_new_tokens=1)
    two_chunks = {**inputs, "chunk_sample_lengths": inputs["chunk_sample_lengths"].repeat(2)}
    with pytest.raises(ValueError, match="one entry per chunk"):
        ours.generate(**two_chunks, max_new_tokens=1)
    shorter = {**inputs, "chunk_sample_lengths": inputs["chunk_sample_lengths"] - 64}  # two tokens fewer
    with pytest.raises(ValueError, match="more audio placeholder tokens than"):
        ours.generate(**shorter, max_new_tokens=1)
    _, logits = generate_logits(ours, inputs, max_new_tokens=1)  # the model is still exact afterwards
    assert_close(logits[0], uncached_logits(upstream, inputs))


def test_dots3_note_refuses_a_multi_token_continuation_past_index_topk():
    # With `index_topk` under the prompt's length, a cached or chunked prefill selects other keys than one forward
    # of the whole prompt (upstream's own chunked prefill too): refused. One forward of the prompt stays exact.
    # Decoding equals upstream's `generate`, not an uncached forward of prompt and answer: upstream's multi-token
    # forward then selects keys among later tokens too (measured: 1e-3 off at the prompt's last token), so its own
    # `generate` differs from that forward; the reference of the steps is upstream's `generate`.
    config = tiny_dots3_note_config()
    config.text_config.index_topk = 8
    upstream = tiny_model(transformers.Dots3NoteForConditionalGeneration, config)
    ours = Dots3NoteForConditionalGeneration(config).eval()
    ours.load_state_dict(upstream.state_dict())
    prompt = Prompt(ours.config, [SYSTEM, AUDIO, [30, 31]], image_seeds=[1])  # 12 + 11 + 2 tokens
    inputs = prompt.inputs()
    with pytest.raises(ValueError, match="past this model's `index_topk`"):
        ours.generate(**inputs, max_new_tokens=1, prefill_chunk_size=5)
    sequences, logits = generate_logits(ours, inputs, max_new_tokens=3, **TEXT_ANSWERS)
    assert_close(logits[0], uncached_logits(upstream, inputs))
    expected_sequences, expected_logits = generate_logits(upstream, inputs, max_new_tokens=3, **TEXT_ANSWERS)
    assert torch.equal(sequences, expected_sequences)
    for step, expected in zip(logits, expected_logits, strict=True):
        assert_close(step, expected)
