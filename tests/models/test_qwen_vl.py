"""Qwen2-VL-like families: videos next to images, positions from the prompt alone, flattened patch inputs.

Qwen2-VL, Qwen2.5-VL, Qwen3-VL (and its MoE) and GLM-4V. The conformance suite runs the image scenarios; these add
what only these families have: a second modality (videos, one placeholder run per frame in Qwen3-VL and GLM-4V, whose
frames reuse the image placeholder), M-RoPE positions that upstream keeps on the model between calls, deepstack
features, and pixel inputs that are patch rows indexed by grids.
"""

from __future__ import annotations

import pytest

from conftest import model_pair
from helpers import (
    Prompt,
    assert_same_steps,
    generate_logits,
)
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE

QWEN_FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"]
# GLM-4V finds image and video placeholders by one token id: as upstream, one forward holds only one of them.
ALL_FAMILIES = [*QWEN_FAMILIES, "glm4v"]
VIDEO = "<video>"  # the video marker of tests/families/cases_qwen.py
SYSTEM = [2, 10, 11, 12, 13, 14, 15, 16]
USER = [20, 21, 22]


class EncoderRuns:
    """Items (images or videos) per vision-tower call, counted with a forward hook on the tower's grid argument."""

    def __init__(self, model):
        self.tower = model.model.visual
        self.items: list[int] = []

    def __enter__(self) -> EncoderRuns:
        def hook(module, args, kwargs, output):
            self.items.append(int(kwargs["grid_thw"].shape[0]))

        self._handle = self.tower.register_forward_hook(hook, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()


@pytest.mark.parametrize("family", QWEN_FAMILIES)
def test_prefix_cache_across_turns_and_interleaved_requests(family):
    """Each turn adds an image or a video; another request runs between turns; every turn resumes from the prefix
    cache and is exact, with each image and video encoded once."""
    upstream, ours = model_pair(family)
    store = PrefixCache(block_size=4)
    ours.encoder_cache.clear()
    config = ours.config
    no_placeholders = {"suppress_tokens": [config.image_token_id, config.video_token_id, 110, 111]}
    other = Prompt(config, [[2, 60], IMAGE, [61], VIDEO, [62]], image_seeds=[40, 41])
    segments, seeds, encoded = [], [], []
    for turn, user in enumerate(([SYSTEM, IMAGE, [30, 31]], [[32], VIDEO, [33]], [[34], IMAGE, [35, 36]])):
        segments += user
        seeds.append(20 + turn)
        prompt = Prompt(config, segments, image_seeds=seeds)
        prefilled_before = store.stats.tokens_prefilled
        with EncoderRuns(ours) as runs:
            sequences, logits = generate_logits(
                ours, prompt.inputs(), max_new_tokens=2, prefix_cache=store, **no_placeholders
            )
        encoded += runs.items
        if turn > 0:  # resumed from the store: only the new part (and a partial block) is prefilled
            assert store.stats.tokens_prefilled - prefilled_before < prompt.length - 8
        _, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2, **no_placeholders)
        assert_same_steps(logits, expected_logits)
        generate_logits(ours, other.inputs(), max_new_tokens=1, prefix_cache=store)  # another request in between
        segments.append(sequences[0, prompt.length :].tolist())
    assert encoded == [1, 1, 1]  # each turn encodes only its new image or video


# -- GLM-4V: video frames are image placeholders, told apart by `mm_token_type_ids` ---------------------------------
