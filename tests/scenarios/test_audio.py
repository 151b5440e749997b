"""Audio clips as items: encoded once per distinct clip, exact in every cached and chunked path.

Every logit is compared with the plain transformers class holding the same weights (one uncached forward of the whole
prompt); encoder runs are counted on the model's own `get_<modality>_features` (`VisionRunCounter`) and prefilled
tokens on its language model (`PrefillCounter`). The clips of `support.families.cases_audio_frames` are padded to 40
frames, of which the first 40, 34, 28 or 22 are real (by seed), so the audio tower's padding rows are exercised.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from conftest import model_pair
from support.caller_caches import cropped_cache
from support.chat import run_chat
from support.generation_checks import (
    TEXT_ANSWERS,
    assert_bad_clips_refused_then_exact,
    assert_exact_without_an_audio_tower,
    assert_short_clip_hits_the_encoder_cache,
)
from support.references import (
    Prompt,
    assert_close,
    collate,
    generate_batch_matching_upstream,
    generate_logits,
    uncached_logits,
)
from support.registry import FAMILY_CASES
from support.traits import audio_as, audio_mask_key, families_with, forward_takes, has_state_layers, takes
from vlmprep import Gemma4ForConditionalGeneration, PrefixCache
from vlmprep.testing import AUDIO, IMAGE, VisionRunCounter, tiny_model
from vlmprep.testing.configs import tiny_gemma4_config

AUDIO_FAMILIES = families_with(takes("audio"))
SYSTEM = [2, *range(10, 21)]  # 12 tokens
# A chat mixing an image (turn 1) and two audio clips (turns 2 and 4) of different real lengths.
USER_TURNS = [[SYSTEM, IMAGE, [30, 31]], [[32, 33], AUDIO, [34]], [[35, 36]], [[37], AUDIO, [38]], [[40, 41]]]
TURN_SEEDS = [100, 101, None, 102, None]  # 101: 22 real frames, 102: all 40


def _mel_bin_axis(features: torch.Tensor, mask: torch.Tensor) -> int:
    # `(clips, frames, mel bins)` or `(clips, mel bins, frames)`: the mask runs along the frames
    return next(axis for axis in (1, 2) if features.shape[axis] != mask.shape[-1])


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_five_turn_chat_with_image_and_audio_feeds_only_new_tokens(family):
    upstream, ours = model_pair(family)
    store = PrefixCache(max_bytes=2**26)
    new_tokens = 3
    seeds = [[] if seed is None else [seed] for seed in TURN_SEEDS]
    chat = run_chat(upstream, ours, USER_TURNS, seeds, store, new_tokens, **TEXT_ANSWERS)
    encoded, fed, minimum = chat.encoded, chat.fed, chat.minimum
    # the image's items (Inkling's patch groups are several), then each clip
    image_items = ours.count_items(Prompt(ours.config, USER_TURNS[0], image_seeds=seeds[0]).inputs())
    assert encoded == [image_items, 1, 1], (
        "each item (the image, then each clip) is encoded once, when it first appears"
    )
    assert fed <= 1.02 * minimum, (fed, minimum)
    assert store.stats.hits == len(USER_TURNS) - 1, "every later turn resumes from the stored prefix"
    if has_state_layers(family):
        assert store.stats.snapshots > 0, "the decoder's states are stored as snapshots"


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
@pytest.mark.parametrize("chunk_size", [3, 5, 8])
def test_chunks_cutting_audio_runs_are_exact(family, chunk_size):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, AUDIO, [30], IMAGE, [31], AUDIO, [32, 33]], image_seeds=[3, 0, 1])
    with VisionRunCounter(ours) as runs:
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefill_chunk_size=chunk_size)
    assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))
    one_call_each = sorted([ours.count_items(prompt.inputs()), ours.count_items(prompt.inputs(), modality="audio")])
    assert sorted(runs.batch_sizes) == one_call_each, "one image call, one call for both clips"


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_a_clip_hits_the_encoder_cache_alone_or_batched_with_a_longer_clip(family):
    assert_short_clip_hits_the_encoder_cache(*model_pair(family), SYSTEM)  # 22 real frames of 40


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_a_cache_ending_inside_an_audio_run_resumes_exactly(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, AUDIO, [30, 31]], image_seeds=[2])
    inputs = prompt.inputs()
    cut = len(SYSTEM) + 4  # inside the clip's run: audio is causal, its remaining rows are fed
    # transformers' prefill of the prompt, cut inside the run (a recurrent state is not cropped: `cropped_cache`)
    _, logits = generate_logits(ours, inputs, max_new_tokens=1, cache=cropped_cache(upstream, inputs, cut))
    assert_close(logits[0], uncached_logits(upstream, inputs))


def test_gemma4_checkpoint_without_audio_tower():
    config = tiny_gemma4_config(with_audio=False)
    upstream = tiny_model(transformers.Gemma4ForConditionalGeneration, config).eval()
    assert_exact_without_an_audio_tower(upstream, Gemma4ForConditionalGeneration(config).eval(), SYSTEM)


@pytest.mark.parametrize("family", families_with(audio_as("input_features")))
def test_bad_audio_inputs_raise_clear_errors(family):
    upstream, ours = model_pair(family)
    inputs = Prompt(ours.config, [SYSTEM, AUDIO, [30]], image_seeds=[1]).inputs()
    mask_key = audio_mask_key(family)
    half_bins = inputs["input_features"].narrow(_mel_bin_axis(inputs["input_features"], inputs[mask_key]), 0, 8)
    more = [({**inputs, "input_features": half_bins}, "mel bins")]
    assert_bad_clips_refused_then_exact(upstream, ours, inputs, "input_features", mask_key, more)


def test_gemma4_with_causal_vision_is_exact():
    # Smaller Gemma 4 checkpoints leave `use_bidirectional_attention` unset: images are causal upstream; the drop-in's
    # blocks then only move chunk ends and resume points (exact either way) and open no mask in the engine.
    config = tiny_gemma4_config(bidirectional=None)
    upstream = tiny_model(transformers.Gemma4ForConditionalGeneration, config).eval()
    ours = Gemma4ForConditionalGeneration(config).eval()
    ours.load_state_dict(upstream.state_dict())
    assert ours.block_layer_types() == ()
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30], AUDIO, [31, 32]], image_seeds=[0, 1])
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefill_chunk_size=3)
    assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_two_clips_behind_identical_ids_never_share_prefix_kv(family):
    upstream, ours = model_pair(family)
    store = PrefixCache(max_bytes=2**26)
    first, second = (Prompt(ours.config, [SYSTEM, AUDIO, [30, 31]], image_seeds=[seed]) for seed in (0, 28))
    assert torch.equal(first.input_ids, second.input_ids), "same ids, other frames"
    for prompt in (first, second, first):
        with VisionRunCounter(ours) as runs:
            _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store)
        assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))
    assert runs.batch_sizes == [], "the first clip's prompt, seen before, resumes from the store without encoding"


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
@pytest.mark.parametrize("chunk_size", [None, 4])
def test_batch_rows_with_clips_match_each_row_alone(family, chunk_size):
    # Upstream expands and splits the call's clips per row itself (`_expand_inputs_for_generation` of Apertus 1.5 and
    # Dots 3 Note); here each row's clips are encoded once and placed in that row, exactly.
    upstream, ours = model_pair(family)
    one = Prompt(ours.config, [[2, 10], AUDIO, [11]], image_seeds=[3])
    two = Prompt(ours.config, [SYSTEM, IMAGE, [30], AUDIO, [31]], image_seeds=[1, 0])
    with VisionRunCounter(ours) as runs:
        if FAMILY_CASES[family].padding_moves_upstream:  # a padded row differs from its prompt alone upstream too
            batch = collate([one, two], ours.generation_config.pad_token_id)
            _, logits = generate_logits(ours, batch, max_new_tokens=1, prefill_chunk_size=chunk_size)
            assert_close(logits[0], uncached_logits(upstream, batch))
        else:
            generate_batch_matching_upstream(upstream, ours, [one, two], prefill_chunk_size=chunk_size)
    one_call_each = sorted([ours.count_items(two.inputs()), 2])
    assert sorted(runs.batch_sizes) == one_call_each, "one image call, one call for both rows' clips"


@pytest.mark.parametrize("family", families_with(takes("audio"), forward_takes("audio_feature_lengths")))
def test_qwen_omni_refuses_lengths_without_mask(family):
    # `use_audio_in_video=True` is checked in `test_audio_in_video.py`
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, AUDIO, [30]], image_seeds=[1])
    inputs = prompt.inputs()
    lengths = inputs.pop("feature_attention_mask").sum(-1)
    with pytest.raises(ValueError, match="without `feature_attention_mask`"):
        ours.generate(**inputs, audio_feature_lengths=lengths, max_new_tokens=1)
