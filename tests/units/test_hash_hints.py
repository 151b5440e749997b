"""Content hashes taken by a caller's hint (`vlmprep.cache.hash_hints`): the very hash `hash_item_inputs` gives, made
once per hint and inputs' layout, and the same encoder-cache keys and answers through `generate`."""

from __future__ import annotations

from unittest import mock

import torch
import transformers

import vlmprep
from vlmprep.cache import hash_hints
from vlmprep.cache.hash_hints import HintedHashes, hinted_hash
from vlmprep.cache.hashing import hash_item_inputs
from vlmprep.testing import tiny_llava_config


def test_a_hint_hashes_once_per_layout_and_salt():
    store = HintedHashes()
    pixels = torch.rand(3, 8, 8)
    calls = []

    def compute(inputs, salt):
        calls.append(salt)
        return hash_item_inputs(inputs, salt=salt)

    with mock.patch.object(hash_hints, "HINTED_HASHES", store):
        first = hinted_hash("image-a", {"pixel_values": pixels}, None, lambda: compute({"pixel_values": pixels}, None))
        again = hinted_hash("image-a", {"pixel_values": pixels}, None, lambda: compute({"pixel_values": pixels}, None))
        assert first == again == hash_item_inputs({"pixel_values": pixels}) and len(calls) == 1
        padded = torch.zeros(3, 8, 9)  # another layout under the same hint (zero-padded elsewhere): hashed
        hinted_hash("image-a", {"pixel_values": padded}, None, lambda: compute({"pixel_values": padded}, None))
        salted = hinted_hash("image-a", {"pixel_values": pixels}, "b", lambda: compute({"pixel_values": pixels}, "b"))
        assert salted == hash_item_inputs({"pixel_values": pixels}, salt="b") and len(calls) == 3
        hinted_hash(None, {"pixel_values": pixels}, None, lambda: compute({"pixel_values": pixels}, None))
        assert len(calls) == 4  # no hint: always hashed
        assert (store.stats.hits, store.stats.hashed) == (1, 3)


def test_generate_with_hints_keys_and_answers_as_without():
    config = tiny_llava_config()
    torch.manual_seed(0)
    model = vlmprep.LlavaForConditionalGeneration(config).eval()
    reference = transformers.LlavaForConditionalGeneration(config).eval()
    reference.load_state_dict(model.state_dict())
    size = config.vision_config.image_size
    image_tokens = (size // config.vision_config.patch_size) ** 2
    input_ids = torch.tensor([[5, 6, *[config.image_token_id] * image_tokens, 7, 8]])
    pixel_values = torch.rand(1, 3, size, size)
    greedy = {"max_new_tokens": 3, "do_sample": False}
    expected = reference.generate(input_ids=input_ids, pixel_values=pixel_values, **greedy)
    hints = {("image", 0): ("media-key", "processor")}
    with mock.patch.object(hash_hints, "HINTED_HASHES", HintedHashes()) as store:
        for _ in range(2):
            model.encoder_cache.clear()
            output = model.generate(input_ids=input_ids, pixel_values=pixel_values, vlmprep_item_hints=hints, **greedy)
            assert torch.equal(output, expected)
        assert (store.stats.hashed, store.stats.hits) == (1, 1)
    # The same encoder-cache keys as hashing gives
    keys = []
    for extra in ({}, {"vlmprep_item_hints": hints}):
        model.encoder_cache.clear()
        model.generate(input_ids=input_ids, pixel_values=pixel_values, **extra, **greedy)
        keys.append(set(model.encoder_cache._entries))
    assert keys[0] == keys[1] and len(keys[0]) == 1
