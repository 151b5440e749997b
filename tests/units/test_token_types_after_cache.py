"""Token types that cover only the tokens after a cache, for the families whose types drive a bidirectional block
(Gemma3's image runs, PaliGemma's prefix; Molmo2 in test_molmo2.py): refused, never padded into a wrong block."""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.caller_caches import cropped_cache
from support.references import SYSTEM, USER, Prompt
from support.traits import attends_bidirectionally, families_with, sampled
from vlmprep.testing import IMAGE


@pytest.mark.parametrize("family", families_with(sampled("foundation"), attends_bidirectionally))
def test_whole_ids_with_the_new_tokens_types_only_are_refused(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31], IMAGE, USER], image_seeds=[0, 1])
    past_length = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[0]).length
    inputs = prompt.inputs()
    inputs["token_type_ids"] = inputs["token_type_ids"][:, past_length:]
    cache = cropped_cache(upstream, prompt.inputs(), past_length)
    with pytest.raises(ValueError, match="whole sequence's `token_type_ids`"):
        ours.generate(**inputs, cache=cache, max_new_tokens=1)


def test_gemma3_new_tokens_types_starting_in_an_image_after_a_cache_are_refused():
    """The cache may end inside the image run: its cached part would keep KV computed without the rest of it."""
    upstream, ours = model_pair("gemma3")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER], image_seeds=[0])
    past_length = int(prompt.full_inputs["token_type_ids"][0].argmax()) + 2  # two image tokens in
    inputs = prompt.inputs()
    inputs["input_ids"] = inputs["input_ids"][:, past_length:]
    inputs["token_type_ids"] = inputs["token_type_ids"][:, past_length:]
    inputs["attention_mask"] = torch.ones(1, prompt.length, dtype=torch.long)
    cache = cropped_cache(upstream, prompt.inputs(), past_length)
    with pytest.raises(ValueError, match="whole sequence's `token_type_ids`"):
        ours.generate(**inputs, cache=cache, max_new_tokens=1)
