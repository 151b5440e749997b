"""Inkling (`inkling_mm_model`), whose image items are patches and whose audio clips are embedded frame by frame: exact
against transformers in every generation mode, each patch and clip encoded once. The shared scenarios that count
encoded *images* (items, here patches) or compare a left-padded row with its prompt alone (which moves Inkling's logits
upstream too) are skipped for this family; these tests check the same things their way."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from conftest import model_pair
from support.caller_caches import first_tokens_cache
from support.chat import run_chat
from support.generation_checks import (
    GENERATION_MODES,
    TEXT_ANSWERS,
    assert_generate_matches_upstream,
    assert_refused_then_exact,
    assert_short_clip_hits_the_encoder_cache,
)
from support.references import (
    SYSTEM,
    USER,
    Prompt,
    assert_close,
    assert_same_steps,
    collate,
    generate_logits,
    uncached_logits,
)
from vlmprep import PrefixCache
from vlmprep.testing import AUDIO, IMAGE, VisionRunCounter

FAMILY = "inkling_mm_model"


def _patches(prompt: Prompt) -> int:
    return prompt.inputs()["pixel_values"].shape[0]


@pytest.mark.parametrize("mode", list(GENERATION_MODES))
def test_generate_matches_transformers_and_encodes_each_item_once(mode):
    upstream, ours = model_pair(FAMILY)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, AUDIO, [30], IMAGE, [31]], image_seeds=[0, 1, 2])
    with VisionRunCounter(ours) as runs:
        assert_generate_matches_upstream(upstream, ours, prompt.inputs(), mode, max_new_tokens=3)
    # One call per modality: every patch once, the clip once (beams and samples share them)
    assert sorted(runs.batch_sizes) == [1, _patches(prompt)]


def test_new_image_next_to_cached_image_encodes_only_its_patches():
    upstream, ours = model_pair(FAMILY)
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30]], image_seeds=[2])
    second = Prompt(ours.config, [SYSTEM, IMAGE, [30], USER, IMAGE, [31]], image_seeds=[2, 3])
    cache = first_tokens_cache(upstream, first.inputs(), first.length)
    with VisionRunCounter(ours) as runs:
        _, logits = generate_logits(ours, second.inputs(), max_new_tokens=2, cache=cache)
    _, expected = generate_logits(upstream, second.inputs(), max_new_tokens=2)
    assert_same_steps(logits, expected)
    assert runs.batch_sizes == [_patches(Prompt(ours.config, [IMAGE], image_seeds=[3]))]


@pytest.mark.parametrize("chunk_size", [None, 1, 4])
def test_left_padded_batch_matches_upstreams_forward_of_the_same_batch(chunk_size):
    upstream, ours = model_pair(FAMILY)
    one = Prompt(ours.config, [[2, 10], IMAGE, [11]], image_seeds=[1])
    two = Prompt(ours.config, [[2, 10, 11], IMAGE, [30], AUDIO, [31]], image_seeds=[2, 3])
    batch = collate([one, two], ours.generation_config.pad_token_id)
    _, logits = generate_logits(ours, batch, max_new_tokens=1, prefill_chunk_size=chunk_size)
    assert_close(logits[0], uncached_logits(upstream, batch))


@pytest.mark.parametrize("chunk_size", [3, 5])
def test_chunks_cutting_audio_runs_are_exact(chunk_size):
    upstream, ours = model_pair(FAMILY)
    prompt = Prompt(ours.config, [SYSTEM, AUDIO, [30], IMAGE, [31], AUDIO, [32, 33]], image_seeds=[3, 1, 0])
    ours.encoder_cache.clear()
    with VisionRunCounter(ours) as runs:
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefill_chunk_size=chunk_size)
    assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))
    assert sorted(runs.batch_sizes) == [2, _patches(prompt)], "one call for the patches, one for both clips"


def test_a_clip_hits_the_encoder_cache_alone_or_batched_with_a_longer_clip():
    assert_short_clip_hits_the_encoder_cache(*model_pair(FAMILY))  # 3 real frames of 6


def test_a_cache_ending_inside_an_audio_run_resumes_exactly():
    upstream, ours = model_pair(FAMILY)
    inputs = Prompt(ours.config, [SYSTEM, AUDIO, [30, 31]], image_seeds=[0]).inputs()
    cut = len(SYSTEM) + 3  # the clip's start token and 2 of its 6 frames: its remaining rows are fed
    # Upstream's forward over the first `cut` tokens, with the clip's first 2 frames (each frame is embedded alone)
    cache = DynamicCache(config=upstream.config)
    with torch.no_grad():
        upstream(
            input_ids=inputs["input_ids"][:, :cut],
            audio_input_ids=inputs["audio_input_ids"][:, :2],
            audio_input_ids_mask=inputs["audio_input_ids_mask"][:, :2],
            cache=cache,
            use_cache=True,
        )
    _, logits = generate_logits(ours, inputs, max_new_tokens=2, cache=cache)
    _, expected = generate_logits(upstream, inputs, max_new_tokens=2)
    assert_same_steps(logits, expected)


def test_five_turn_chat_with_images_and_audio_is_exact_and_encodes_each_item_once():
    # The prefix store refuses this decoder (layers holding both short-convolution states and KV): each turn is
    # prefilled whole, exactly, and the encoder cache still encodes each item once, when it first appears.
    upstream, ours = model_pair(FAMILY)
    ours.encoder_cache.clear()
    turns = [[SYSTEM, IMAGE, [30, 31]], [[32, 33], AUDIO, [34]], [[35, 36]], [[37], AUDIO, [38]], [[40, 41]]]
    seeds = [[100], [101], [], [102], []]
    chat = run_chat(upstream, ours, turns, seeds, PrefixCache(max_bytes=2**24), 2, **TEXT_ANSWERS)
    image_patches = _patches(Prompt(ours.config, [IMAGE], image_seeds=[100]))
    assert chat.encoded == [image_patches, 1, 1]


def test_bad_audio_inputs_raise_clear_errors_then_the_model_is_still_exact():
    upstream, ours = model_pair(FAMILY)
    inputs = Prompt(ours.config, [SYSTEM, AUDIO, [30]], image_seeds=[1]).inputs()
    levels, mask = inputs["audio_input_ids"], inputs["audio_input_ids_mask"]
    without_audio = {key: value for key, value in inputs.items() if not key.startswith("audio_")}
    bad = [
        (without_audio, "no pixel inputs were passed"),
        (
            {**inputs, "audio_input_ids": levels.repeat(2, 1, 1), "audio_input_ids_mask": mask.repeat(2, 1)},
            r"2 audio\(s\) were passed but the prompt has 1 audio placeholder run",
        ),
        ({**inputs, "audio_input_ids": levels[..., :2]}, "mel bins"),
        ({**inputs, "audio_input_ids": levels.float()}, "integer dMel levels"),
        ({**inputs, "audio_input_ids": levels + 8}, "levels outside"),
        ({**inputs, "audio_input_ids_mask": torch.cat([mask, mask[:, -1:]], dim=1)}, "one entry per frame"),
        ({**inputs, "audio_input_ids_mask": torch.ones_like(mask)}, "does not match the audios' token counts"),
    ]
    assert_refused_then_exact(upstream, ours, inputs, bad)


def test_audio_rows_and_raw_audio_in_one_forward_are_refused():
    _, ours = model_pair(FAMILY)
    inputs = Prompt(ours.config, [SYSTEM, AUDIO, [30]], image_seeds=[1]).inputs()
    encoded = ours.model.get_audio_features(inputs["audio_input_ids"], inputs["audio_input_ids_mask"])
    with pytest.raises(ValueError, match="not both"):
        ours(**inputs, mm_encoder_outputs={"audio": encoded})
    with torch.no_grad():
        raw = ours(**inputs).logits
        rows = ours(input_ids=inputs["input_ids"], mm_encoder_outputs={"audio": encoded}).logits
    assert_close(rows, raw)
