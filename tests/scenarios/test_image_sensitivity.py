"""Every tiny model sees its images (videos, audio clips), and the drop-in is exact on them.

Upstream initialisation leaves some multimodal weights zero (Gemma3's `mm_input_projection_weight`) or vanishing
(GOT-OCR2's SAM tower): with them no image reaches the logits, and every image check passes whatever features are
used. `vlmprep.testing.tiny_model` (used by `model_pair`) re-draws those weights. Here, per family and per medium:
two different images (or videos, or audio clips) give clearly different logits with the plain transformers class
after the medium, and the drop-in's logits for each equal upstream's uncached forwards of the whole prompt.
"""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.references import NO_SPECIAL_TOKENS, Prompt, assert_steps_match_upstream, generate_logits
from support.registry import FAMILY_CASES
from support.traits import families_with, is_encoder_decoder, not_
from vlmprep.testing import AUDIO, IMAGE, VIDEO

SYSTEM = [2, 10, 11, 12, 13]
USER = [20, 21, 22]
# Seed 28 draws other pixels of the same shape as seed 0 in every builder (sizes, tiles, grids and masks follow the
# seed modulo 7, 4 or 2), so the two prompts have the same ids and differ only in their pixels.
SEEDS = (0, 28)
MIN_EFFECT = 1e-3  # an image changes upstream's logits after it by more than this (1e-2 typical, 7e-3 the least)


def _params() -> list:
    params = []
    # An encoder-decoder's answer is the decoder's: tests/scenarios/test_encoder_decoder.py checks its images
    for family in families_with(not_(is_encoder_decoder)):
        params.append(pytest.param(family, IMAGE, id=f"{family}-image"))
        if FAMILY_CASES[family].builds_videos:
            params.append(pytest.param(family, VIDEO, id=f"{family}-video"))
        if FAMILY_CASES[family].builds_audio:
            params.append(pytest.param(family, AUDIO, id=f"{family}-audio"))
    return params


@pytest.mark.parametrize(("family", "medium"), _params())
def test_other_pixels_change_the_logits_and_the_drop_in_is_exact(family, medium):
    upstream, ours = model_pair(family)
    prompts = [Prompt(ours.config, [SYSTEM, medium, USER], image_seeds=[seed]) for seed in SEEDS]
    first, second = (prompt.inputs() for prompt in prompts)
    pixel_keys = [key for key in first if key in prompts[0].case.pixel_keys]
    assert first.keys() == second.keys()
    assert all(torch.equal(first[key], second[key]) for key in first if key not in pixel_keys), "not only pixels"
    # (per-image counts may be lists, as a processor returns them: Unlimited-OCR's `num_local_patches`)
    first_items, second_items = (
        {key: torch.as_tensor(inputs[key]) for key in pixel_keys} for inputs in (first, second)
    )
    assert all(first_items[key].shape == second_items[key].shape for key in pixel_keys)
    assert not all(torch.equal(first_items[key], second_items[key]) for key in pixel_keys)

    with torch.no_grad():
        logits = [upstream(**inputs, use_cache=False).logits[0] for inputs in (first, second)]
    after = slice(prompts[0].length - len(USER), None)  # the text after the medium
    effect = (logits[0][after] - logits[1][after]).abs().max().item()
    assert effect > MIN_EFFECT, f"other pixels change transformers' logits after the {medium} by only {effect:.1e}"
    last_effect = (logits[0][-1] - logits[1][-1]).abs().max().item()
    assert last_effect > MIN_EFFECT, f"the last position (compared below) moves by only {last_effect:.1e}"

    for prompt in prompts:  # the second prompt right after the first: no reuse of the first one's features
        sequences, step_logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2, **NO_SPECIAL_TOKENS)
        assert_steps_match_upstream(upstream, prompt, sequences[0, prompt.length :], step_logits)
