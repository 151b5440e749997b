"""Audio clips of the omni families of issue 26 (Muse Spark's and Apertus 1.5's raw waveforms, Dots 3 Note's log-mel
chunks): `test_audio.py`'s checks, on these families, and their own clear failures.

Every logit is compared with the plain transformers class holding the same weights (one uncached forward of the whole
prompt); encoder runs are counted with `VisionRunCounter`. The waveforms (`support.families.cases_omnib`) are 40
samples, of which the first 40, 34, 28 or 22 are real (by seed): the last audio token of a short clip reads padding.
A Dots 3 Note clip is one chunk of 320, 272, 224 or 176 samples (by seed), or (seed modulo 7 modulo 4 == 2) two
chunks in one run, each chunk an item.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from test_audio import SYSTEM, TEXT_ANSWERS, TURN_SEEDS, USER_TURNS
from test_audio import test_a_cache_ending_inside_an_audio_run_resumes_exactly as _cache_inside_run
from test_audio import test_a_clip_hits_the_encoder_cache_alone_or_batched_with_a_longer_clip as _alone_or_batched
from test_audio import test_chunks_cutting_audio_runs_are_exact as _chunks
from test_audio import test_five_turn_chat_with_image_and_audio_feeds_only_new_tokens as _five_turns
from test_audio import test_two_clips_behind_identical_ids_never_share_prefix_kv as _identical_ids

from conftest import model_pair
from support.caller_caches import cropped_cache
from support.chat import run_chat
from support.generation_checks import assert_bad_clips_refused_then_exact
from support.references import Prompt, assert_close, generate_batch_matching_upstream, generate_logits, uncached_logits
from vlmprep import Dots3NoteForConditionalGeneration, PrefixCache
from vlmprep.testing import AUDIO, IMAGE, VisionRunCounter, tiny_model
from vlmprep.testing.configs import tiny_dots3_note_config

WAVEFORM_FAMILIES = ["apertus1p5", "muse_spark"]
AUDIO_FAMILIES = [*WAVEFORM_FAMILIES, "dots3_note"]
AUDIO_MASK_KEYS = {"apertus1p5": "padding_mask", "muse_spark": "input_values_mask"}


@pytest.mark.parametrize("family", WAVEFORM_FAMILIES)
def test_five_turn_chat_with_image_and_audio_feeds_only_new_tokens(family):
    _five_turns(family)


def test_dots3_note_five_turn_chat_is_exact_and_encodes_each_item_once():
    # Dots 3 Note's indexed-attention layers also cache the indexer's keys, which the prefix store does not hold yet
    # (as GLM-5-Next's): the store is bypassed with a warning and every turn prefills its whole prompt, exactly; the
    # encoder cache still encodes each item once.
    upstream, ours = model_pair("dots3_note")
    seeds = [[] if seed is None else [seed] for seed in TURN_SEEDS]
    chat = run_chat(upstream, ours, USER_TURNS, seeds, PrefixCache(max_bytes=2**26), 3, **TEXT_ANSWERS)
    assert chat.encoded == [1, 1, 1], "each item (the image, then each one-chunk clip) is encoded once"


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
@pytest.mark.parametrize("chunk_size", [3, 5, 8])
def test_chunks_cutting_audio_runs_are_exact(family, chunk_size):
    _chunks(family, chunk_size)


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_a_clip_hits_the_encoder_cache_alone_or_batched_with_a_longer_clip(family):
    _alone_or_batched(family)


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_a_cache_ending_inside_an_audio_run_resumes_exactly(family):
    _cache_inside_run(family)


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_two_clips_behind_identical_ids_never_share_prefix_kv(family):
    _identical_ids(family)


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
@pytest.mark.parametrize("chunk_size", [None, 4])
def test_batch_rows_with_clips_match_each_row_alone(family, chunk_size):
    # Upstream expands and splits the call's clips per row itself (`_expand_inputs_for_generation` of Apertus 1.5 and
    # Dots 3 Note); here each row's clips are encoded once and placed in that row, exactly.
    upstream, ours = model_pair(family)
    one = Prompt(ours.config, [[2, 10], AUDIO, [11]], image_seeds=[3])
    two = Prompt(ours.config, [SYSTEM, IMAGE, [30], AUDIO, [31]], image_seeds=[1, 0])
    with VisionRunCounter(ours) as runs:
        generate_batch_matching_upstream(upstream, ours, [one, two], prefill_chunk_size=chunk_size)
    assert sorted(runs.batch_sizes) == [1, 2], "one image call, one call for both rows' clips"


@pytest.mark.parametrize("family", WAVEFORM_FAMILIES)
def test_bad_waveform_inputs_raise_clear_errors(family):
    upstream, ours = model_pair(family)
    inputs = Prompt(ours.config, [SYSTEM, AUDIO, [30]], image_seeds=[1]).inputs()  # 34 real samples of 40
    mask_key = AUDIO_MASK_KEYS[family]
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
