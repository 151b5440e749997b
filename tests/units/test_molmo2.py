"""Molmo2 beyond the conformance matrix: the facts its layout rests on (an image's features depend on its own crops
only; every image token attends to every other one across images), checked on transformers' class, and the drop-in
exact where a cache, a chunk or a stored prefix would end between two images."""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.caller_caches import cache_of
from support.families.cases_molmo2 import POOLING_PER_IMAGE, image_inputs
from support.references import (
    SYSTEM,
    USER,
    Prompt,
    assert_close,
    assert_same_steps,
    generate_logits,
    reference_next_logits,
)
from vlmprep import EncoderCache, PrefixCache
from vlmprep.batching.support import check_batching_support
from vlmprep.models.layouts.pooled_crops import group_runs
from vlmprep.testing import IMAGE, PrefillCounter, VisionRunCounter

TWO_IMAGES = [SYSTEM, IMAGE, [30, 31], IMAGE, USER]


def _first_image_turn(config) -> Prompt:
    return Prompt(config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[2])


def _block(prompt: Prompt) -> tuple[int, int]:
    # First and one past the last image token (`mm_token_type_ids == 1`)
    positions = prompt.full_inputs["mm_token_type_ids"][0].nonzero().flatten()
    return int(positions[0]), int(positions[-1]) + 1


def test_an_image_encodes_alike_alone_and_after_other_images():
    upstream, ours = model_pair("molmo2")
    alone, call = image_inputs(ours.config, [2]), image_inputs(ours.config, [0, 6, 2])
    keys = ("pixel_values", "image_token_pooling", "image_grids")
    if POOLING_PER_IMAGE:  # 5.25 on: several images need their crop counts (their indices are their own)
        keys = (*keys, "image_num_crops")
    with torch.no_grad():
        expected = upstream.model.get_image_features(**{key: alone[key] for key in keys}).pooler_output[0]
        in_call = upstream.model.get_image_features(**{key: call[key] for key in keys}).pooler_output[2]
        selected = ours.select_item_inputs(call, [2])
    assert_close(in_call, expected)
    assert expected.abs().max() > 1e-2, "the tiny adapter must give features that matter"
    assert set(selected) == set(keys)
    for key in keys:  # the item's inputs are the image's own, its pooling indices relative to its first crop
        assert torch.equal(selected[key], alone[key]), key


def test_a_later_image_changes_the_logits_of_the_tokens_before_it():
    """Upstream's fact the layout's one block stands for: the first image's tokens attend to the second image."""
    upstream, _ = model_pair("molmo2")
    first, other = (Prompt(upstream.config, TWO_IMAGES, image_seeds=[2, seed]) for seed in (0, 1))
    # The second image starts at the first image token after the first image's block
    first_end = _block(_first_image_turn(upstream.config))[1]
    second_start = first_end + int(first.full_inputs["mm_token_type_ids"][0, first_end:].argmax())
    with torch.no_grad():
        logits = [upstream(**prompt.inputs()).logits[0, :second_start] for prompt in (first, other)]
    assert (logits[0] - logits[1]).abs().max() > 1e-3


def test_cache_of_an_earlier_turn_is_recomputed_from_its_first_image():
    upstream, ours = model_pair("molmo2")
    turn_1 = _first_image_turn(ours.config)
    turn_2 = Prompt(ours.config, TWO_IMAGES, image_seeds=[2, 0])
    cache = cache_of(upstream, turn_1.inputs())  # its first image never saw the second one
    with VisionRunCounter(ours) as runs, PrefillCounter(ours) as prefill:
        _, logits = generate_logits(ours, turn_2.inputs(), max_new_tokens=1, cache=cache)
    assert_close(logits[0], reference_next_logits(upstream, turn_2))
    assert runs.images == 2
    assert prefill.prefilled(new_tokens=1) == turn_2.length - _block(turn_2)[0]


def test_chunks_never_end_between_two_images():
    upstream, ours = model_pair("molmo2")
    prompt = Prompt(ours.config, TWO_IMAGES, image_seeds=[2, 0])
    start, end = _block(prompt)
    with PrefillCounter(ours) as prefill:
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2, prefill_chunk_size=3)
    _, expected = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    assert_same_steps(logits, expected)
    assert end - start in prefill.lengths  # the block is one chunk, from its first token to its last


def test_stored_turn_is_reused_up_to_the_first_image_only_when_an_image_follows():
    upstream, ours = model_pair("molmo2")
    store, ours.encoder_cache = PrefixCache(max_bytes=2**24), EncoderCache(max_bytes=2**24)
    turn_1 = _first_image_turn(ours.config)
    turn_2 = Prompt(ours.config, TWO_IMAGES, image_seeds=[2, 0])
    generate_logits(ours, turn_1.inputs(), max_new_tokens=1, prefix_cache=store)
    with VisionRunCounter(ours) as runs, PrefillCounter(ours) as prefill:
        _, logits = generate_logits(ours, turn_2.inputs(), max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], reference_next_logits(upstream, turn_2))
    assert runs.batch_sizes == [1], "the first image comes from the encoder cache"
    assert prefill.prefilled(new_tokens=1) == turn_2.length - _block(turn_2)[0]


def test_videos_and_continuous_batching_are_refused():
    _, ours = model_pair("molmo2")
    prompt = _first_image_turn(ours.config)
    inputs = prompt.inputs()
    videos = {
        "pixel_values_videos": inputs.pop("pixel_values"),
        "video_token_pooling": inputs.pop("image_token_pooling"),
    }
    with pytest.raises(ValueError, match="does not take videos"):
        ours.generate(**inputs, **videos, max_new_tokens=1)
    for with_items in (True, False):  # upstream's forward fails on the engine's paged cache, text requests too
        with pytest.raises(ValueError, match="cache.is_initialized"):
            check_batching_support(ours, with_items=with_items)


def test_runs_are_grouped_into_images_by_their_grids():
    # One run per image (no column tokens, as transformers' own tester writes them) or one per row
    assert group_runs([32, 32], [32, 32]) == [[32], [32]]
    assert group_runs([2, 2, 4, 4], [4, 8]) == [[2, 2], [4, 4]]
    assert group_runs([4], [4, 8]) == [[4]]  # an image with no run left: the image count check names both counts
    with pytest.raises(ValueError, match="does not match the images' token counts"):
        group_runs([3, 2], [4])
    with pytest.raises(ValueError, match="more image placeholder tokens than the 1 images"):
        group_runs([4, 4], [4])


def test_stored_prompt_with_two_images_serves_no_kv_of_its_first_image():
    """Its first image's KV saw the second image: a prompt with the first image only must not resume inside it."""
    upstream, ours = model_pair("molmo2")
    store = PrefixCache(max_bytes=2**24)
    stored = Prompt(ours.config, TWO_IMAGES, image_seeds=[2, 0])
    shorter = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32]], image_seeds=[2])
    generate_logits(ours, stored.inputs(), max_new_tokens=1, prefix_cache=store)
    with PrefillCounter(ours) as prefill:
        _, logits = generate_logits(ours, shorter.inputs(), max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], reference_next_logits(upstream, shorter))
    assert prefill.prefilled(new_tokens=1) == shorter.length - _block(shorter)[0]


def _new_tokens_only(prompt: Prompt, prompt_config, past_length: int, whole_ids: bool) -> dict:
    # The second turn with `mm_token_type_ids` of the tokens after the cache only (a caller's slip)
    inputs = prompt.inputs()
    inputs["mm_token_type_ids"] = inputs["mm_token_type_ids"][:, past_length:]
    if not whole_ids:  # transformers' idiom: only the new ids, the mask covering cache and new tokens
        inputs["input_ids"] = inputs["input_ids"][:, past_length:]
        inputs["attention_mask"] = torch.ones(1, prompt.length, dtype=torch.long)
        inputs.update(image_inputs(prompt_config, [0]))  # the pixel inputs of the new image only
    return inputs


@pytest.mark.parametrize("whole_ids", [False, True], ids=["new_ids", "whole_ids"])
def test_token_types_of_the_new_tokens_only_after_a_cache_with_an_image_are_refused(whole_ids):
    """The cached image belongs to the block: types that leave it out must not turn it into text silently."""
    upstream, ours = model_pair("molmo2")
    turn_1 = _first_image_turn(ours.config)
    turn_2 = Prompt(ours.config, TWO_IMAGES, image_seeds=[2, 0])
    cache = cache_of(upstream, turn_1.inputs())
    inputs = _new_tokens_only(turn_2, ours.config, turn_1.length, whole_ids)
    with pytest.raises(ValueError, match="whole sequence's `mm_token_type_ids`"):
        ours.generate(**inputs, cache=cache, max_new_tokens=1)


def test_token_types_of_new_text_tokens_only_after_a_cache_with_an_image_stay_exact():
    """New tokens without an image token join no block: the cached part padded as text changes nothing."""
    upstream, ours = model_pair("molmo2")
    turn_1 = _first_image_turn(ours.config)
    turn_2 = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31], USER], image_seeds=[2])
    cache = cache_of(upstream, turn_1.inputs())
    inputs = {
        "input_ids": turn_2.input_ids[:, turn_1.length :],
        "attention_mask": torch.ones(1, turn_2.length, dtype=torch.long),
        "mm_token_type_ids": turn_2.full_inputs["mm_token_type_ids"][:, turn_1.length :],
    }
    _, logits = generate_logits(ours, inputs, max_new_tokens=1, cache=cache)
    assert_close(logits[0], reference_next_logits(upstream, turn_2))


class _TowerCrops:
    """Crops through the vision tower, by a forward hook on it (each image's crops are its tower rows)."""

    def __init__(self, model):
        self.tower, self.crops = model.model.vision_tower, 0

    def __enter__(self):
        self.handle = self.tower.register_forward_hook(self._count)
        return self

    def _count(self, module, args, output):
        self.crops += args[0].shape[0]

    def __exit__(self, *exc):
        self.handle.remove()


# Seeds 6 and 2 have three crops each (a low-resolution view and two high-resolution crops), 0 and 1 one: an image's
# pooling indices then start past several crops of the images before it.
THREE_IMAGES = [SYSTEM, IMAGE, [30], IMAGE, [31, 32], IMAGE, USER]


def test_several_images_with_several_crops_each_are_exact_and_each_distinct_image_is_encoded_once():
    """transformers 5.25 reads each image's `image_token_pooling` as its own and needs `image_num_crops` for several
    images: before the layout followed it, this call failed (`image_num_crops` is required)."""
    upstream, ours = model_pair("molmo2")
    ours.encoder_cache = EncoderCache(max_bytes=2**24)
    prompt = Prompt(ours.config, THREE_IMAGES, image_seeds=[6, 0, 2])
    with _TowerCrops(ours) as tower:
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=3)
    _, expected = generate_logits(upstream, prompt.inputs(), max_new_tokens=3)
    assert_same_steps(logits, expected)
    assert_close(logits[0], reference_next_logits(upstream, prompt))
    assert tower.crops == 3 + 1 + 3, "each image's crops go through the tower once"
    with _TowerCrops(ours) as tower:  # the same images again: all from the encoder cache
        _, again = generate_logits(ours, prompt.inputs(), max_new_tokens=3)
    assert_same_steps(again, expected)
    assert tower.crops == 0


@pytest.mark.parametrize("cached_seeds", [[6], [6, 1]], ids=["one_cached", "two_cached"])
def test_an_image_encoded_alone_after_cached_ones_is_exact(cached_seeds):
    """The new image's crops sit past the cached images' crops in the call but are encoded alone: before the layout
    followed 5.25's per-image indices, they were shifted below zero (a RuntimeError)."""
    upstream, ours = model_pair("molmo2")
    ours.encoder_cache = EncoderCache(max_bytes=2**24)
    segments = [SYSTEM, *[part for _ in cached_seeds for part in (IMAGE, [30])]]
    earlier = Prompt(ours.config, segments, image_seeds=cached_seeds)
    prompt = Prompt(ours.config, [*segments, IMAGE, USER], image_seeds=[*cached_seeds, 2])
    generate_logits(ours, earlier.inputs(), max_new_tokens=1)
    with VisionRunCounter(ours) as runs, _TowerCrops(ours) as tower:
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2)
    _, expected = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    assert_same_steps(logits, expected)
    assert_close(logits[0], reference_next_logits(upstream, prompt))
    assert runs.batch_sizes == [1], "the cached images come from the encoder cache"
    assert tower.crops == 3  # seed 2's three crops alone


def test_several_images_chunked_and_after_a_cached_prefix_are_exact():
    upstream, ours = model_pair("molmo2")
    ours.encoder_cache = EncoderCache(max_bytes=2**24)
    prompt = Prompt(ours.config, THREE_IMAGES, image_seeds=[6, 1, 2])
    expected = reference_next_logits(upstream, prompt)
    with _TowerCrops(ours) as tower:
        _, chunked = generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefill_chunk_size=4)
    assert_close(chunked[0], expected)
    assert tower.crops == 3 + 1 + 3, "encoded once, not once per chunk"
    # A caller's cache of the system text: the whole image block is prefilled on top of it, its features cached
    cache = cache_of(upstream, {"input_ids": prompt.input_ids[:, : len(SYSTEM)]})
    with _TowerCrops(ours) as tower:
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, cache=cache)
    assert_close(logits[0], expected)
    assert tower.crops == 0
