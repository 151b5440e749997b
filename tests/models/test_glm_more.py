"""GLM-4.5V (`glm4v_moe`) and GLM-4.6V (`glm46v`): what the conformance suite skips for them, and their videos.

Upstream's beams are wrong for these families (`_expand_multimodal_outputs` copied from GLM-4V repeats features image
by image), so the conformance suite's `generate_matches_transformers` is skipped: greedy and sampling are checked
against transformers here, beams against uncached forwards. Videos (frames of image placeholders, told apart by
`mm_token_type_ids`) are checked as GLM-4V's in tests/models/test_qwen_vl.py.
"""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from conftest import model_pair
from helpers import Prompt, assert_same_steps, generate_logits

FAMILIES = ["glm4v_moe", "glm46v"]
VIDEO = "<video>"  # the video marker of tests/families/cases_qwen.py
SYSTEM = [2, 10, 11, 12, 13, 14, 15, 16]
USER = [20, 21, 22]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_chunk_size_is_exact_with_a_video(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [[2, 10], VIDEO, [11, 12]], image_seeds=[1])
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    for chunk_size in range(1, prompt.length + 1):
        sequences, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2, prefill_chunk_size=chunk_size)
        assert torch.equal(sequences, expected_sequences), f"chunk size {chunk_size}"
        assert_same_steps(logits, expected_logits)


@pytest.mark.parametrize("family", FAMILIES)
def test_cache_ending_anywhere_in_a_video(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [[2, 10], VIDEO, [11, 12]], image_seeds=[0])
    _, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    video_positions = (prompt.full_inputs["mm_token_type_ids"][0] == 2).nonzero().flatten().tolist()
    for cached in range(video_positions[0], video_positions[-1] + 2):
        cache = DynamicCache(config=upstream.config)
        with torch.no_grad():
            cache = upstream(**prompt.inputs(), cache=cache, use_cache=True).cache
        cache.crop(cached - prompt.length)
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2, cache=cache, prefill_chunk_size=3)
        assert_same_steps(logits, expected_logits)
