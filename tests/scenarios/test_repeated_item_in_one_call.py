"""One call holding the same item twice: the encoder runs once per distinct item, and the logits stay transformers'.

A prompt with an image twice (identical pixel inputs, two placeholder runs) and a third, different image is encoded
as its two distinct images: the repeat takes the first occurrence's rows, found by the encoder-cache key (model
identity and content hash, family extras included), as the cache itself would find them in a later call. Every step
equals one uncached forward of the plain transformers class on the whole prompt and answer, which encodes all three.
Encoder runs are counted on the model's own encoders (`vlmprep.testing.VisionRunCounter`).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from conftest import ALL_FAMILIES, model_pair
from support.references import NO_SPECIAL_TOKENS, Prompt, assert_steps_match_upstream, generate_logits
from support.registry import FAMILY_CASES, scenario, skip_marks
from support.traits import families_with, sampled
from vlmprep import EncoderCache, PrefixCache
from vlmprep.testing import AUDIO, IMAGE, VIDEO, VisionRunCounter

SYSTEM = [2, 10, 11, 12, 13]
USER = [20, 21, 22]
SCENARIO = "repeated_item_in_one_call"


def repeated(medium) -> list:
    """Segments with `medium` three times: seeds (1, 1, 2) make the first two identical and the third another."""
    return [SYSTEM, medium, [30], medium, [31], medium, USER]


@contextlib.contextmanager
def encoder_cache(model, cache: EncoderCache | None):
    saved, model.encoder_cache = model.encoder_cache, cache
    try:
        yield
    finally:
        model.encoder_cache = saved


def same_inputs(first, second) -> bool:
    """Whether two items' inputs are equal, value for value (tensors with their dtype and shape)."""
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return (
            isinstance(first, torch.Tensor)
            and isinstance(second, torch.Tensor)
            and first.dtype == second.dtype
            and torch.equal(first, second)
        )
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(same_inputs(first[key], second[key]) for key in first)
    if isinstance(first, (list, tuple)) and isinstance(second, (list, tuple)):
        return len(first) == len(second) and all(same_inputs(a, b) for a, b in zip(first, second, strict=True))
    return first == second


def distinct_items(ours, prompt: Prompt, modality: str) -> int:
    """The items the encoder must see, as the counter counts them: those whose inputs (pixels and per-item side
    inputs) no earlier item has. An item is what the family encodes apart (an image, or one of its tiles or patches).

    The builders give seeds (1, 1, 2) equal pixels, but a family's per-item side inputs may still tell the first two
    apart (InstructBLIP's Q-Former text is the text before each image): those are two items, encoded apart."""
    inputs = prompt.inputs()
    items = [
        ours.select_item_inputs(inputs, [index], modality=modality)
        for index in range(ours.count_items(inputs, modality=modality))
    ]
    distinct = [
        index for index, item in enumerate(items) if not any(same_inputs(item, seen) for seen in items[:index])
    ]
    return ours.count_items(ours.select_item_inputs(inputs, distinct, modality=modality), modality=modality)


def check_repeated_item(family: str, medium, modality: str, cache: EncoderCache | None, **kwargs):
    """Generate on the repeated prompt and check each step against transformers.

    Returns:
        `tuple[list[int], int]`: the items each encoder call took, and the distinct items of the prompt.
    """
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, repeated(medium), image_seeds=[1, 1, 2])
    with encoder_cache(ours, cache), VisionRunCounter(ours) as runs:
        sequences, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2, **NO_SPECIAL_TOKENS, **kwargs)
    assert_steps_match_upstream(upstream, prompt, sequences[0, prompt.answer_start :], logits)
    return runs.batch_sizes, distinct_items(ours, prompt, modality)


@scenario(name=SCENARIO)
def test_an_image_twice_is_encoded_once(family):
    facts = model_pair(family)[1].vision_facts
    # (a family of videos only, InstructBLIP-Video, builds an `IMAGE` segment as its one modality's item)
    modality = facts.modalities[0].name
    batch_sizes, distinct = check_repeated_item(family, IMAGE, modality, EncoderCache(max_bytes=2**24))
    assert batch_sizes == [distinct], "one encoder call, for the distinct images only"


def _other_media() -> list:
    params = []
    for family in ALL_FAMILIES:
        marks = skip_marks(family, SCENARIO)
        if FAMILY_CASES[family].builds_videos:
            params.append(pytest.param(family, VIDEO, "video", id=f"{family}-video", marks=marks))
        if FAMILY_CASES[family].builds_audio:
            params.append(pytest.param(family, AUDIO, "audio", id=f"{family}-audio", marks=marks))
    return params


@pytest.mark.parametrize(("family", "medium", "modality"), _other_media())
def test_a_video_or_audio_clip_twice_is_encoded_once(family, medium, modality):
    batch_sizes, distinct = check_repeated_item(family, medium, modality, EncoderCache(max_bytes=2**24))
    assert sum(batch_sizes) == distinct, batch_sizes


def test_a_cached_repeat_is_looked_up_once_and_not_encoded():
    cache = EncoderCache(max_bytes=2**24)
    assert check_repeated_item("gemma3", IMAGE, "image", cache) == ([2], 2)
    assert (cache.stats.misses, cache.stats.hits, cache.stats.entries) == (2, 0, 2)
    assert check_repeated_item("gemma3", IMAGE, "image", cache)[0] == []  # both distinct images from the cache
    assert cache.stats.hits == 2, "one lookup per distinct image of a call"


@pytest.mark.parametrize("family", families_with(sampled("mainstream")))
def test_cache_off_repeats_are_shared_where_the_call_has_the_hashes(family):
    """With the encoder cache off, a call hashes nothing only to find repeats: each occurrence is encoded, as
    upstream does. A prefix cache's lookup hashes every item anyway, and those hashes find the repeat."""
    assert check_repeated_item(family, IMAGE, "image", None) == ([3], 2)
    assert check_repeated_item(family, IMAGE, "image", None, prefix_cache=PrefixCache()) == ([2], 2)


def test_train_mode_encodes_every_occurrence():
    """In train mode an item's features are one draw of dropout (no reuse across calls either): each occurrence is
    encoded, as upstream does."""
    _, ours = model_pair("gemma3")
    prompt = Prompt(ours.config, repeated(IMAGE), image_seeds=[1, 1, 2])
    ours.model.vision_tower.train()
    try:
        with encoder_cache(ours, EncoderCache(max_bytes=2**24)), VisionRunCounter(ours) as runs:
            generate_logits(ours, prompt.inputs(), max_new_tokens=1)
    finally:
        ours.eval()
    assert runs.batch_sizes == [3]
