"""InstructBLIP: an image's features depend on its instruction (`qformer_input_ids`), so the instruction is part of
the image's identity in the encoder cache and the prefix store."""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.references import next_logits, uncached_logits, with_encoder_cache
from vlmprep import PrefixCache
from vlmprep.testing import VisionRunCounter, random_pixels

PROMPT = torch.tensor([[1, 5, 6, 122, 122, 122, 122, 7, 8, 9]])


def _inputs(instruction: list[int]) -> dict:
    return {
        "input_ids": PROMPT,
        "attention_mask": torch.ones_like(PROMPT),
        "pixel_values": random_pixels(1, seed=4),
        "qformer_input_ids": torch.tensor([instruction]),
        "qformer_attention_mask": torch.ones(1, len(instruction), dtype=torch.long),
    }


@pytest.fixture
def models():
    upstream, ours = model_pair("instructblip")
    with with_encoder_cache(ours):
        yield upstream, ours


def test_image_resent_with_another_instruction_is_encoded_again(models):
    upstream, ours = models
    first, second = _inputs([5, 6, 7]), _inputs([8, 9, 10])
    expected = [uncached_logits(upstream, inputs) for inputs in (first, second)]
    assert (expected[0] - expected[1]).abs().max() > 1e-3  # the instruction changes upstream's logits
    calls = []
    for inputs, reference in ((first, expected[0]), (second, expected[1]), (first, expected[0])):
        with VisionRunCounter(ours) as runs:
            torch.testing.assert_close(next_logits(ours, inputs), reference, atol=1e-5, rtol=0)
        calls.append(runs.calls)
    # Encoded once per instruction; the first instruction's features then come from the encoder cache
    assert calls == [1, 1, 0]


def test_stored_prefix_with_another_instruction_is_not_reused(models):
    upstream, ours = models
    store = PrefixCache()
    first, second = _inputs([5, 6, 7]), _inputs([8, 9, 10])
    next_logits(ours, first, prefix_cache=store)
    expected = uncached_logits(upstream, second)
    torch.testing.assert_close(next_logits(ours, second, prefix_cache=store), expected, atol=1e-5, rtol=0)


def test_missing_or_misshapen_instruction_is_refused(models):
    _, ours = models
    inputs = _inputs([5, 6, 7])
    inputs.pop("qformer_input_ids")
    with pytest.raises(ValueError, match="qformer_input_ids"):
        ours.generate(**inputs, max_new_tokens=1)
    inputs = _inputs([5, 6, 7])
    inputs["qformer_input_ids"] = inputs["qformer_input_ids"].repeat(2, 1)
    with pytest.raises(ValueError, match="one row of Q-Former ids per image"):
        ours.generate(**inputs, max_new_tokens=1)
