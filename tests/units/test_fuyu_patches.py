"""Fuyu, whose items are patches: exact against transformers in every generation mode, and each distinct patch encoded
once. The shared scenarios that count encoded *images* (`VisionRunCounter.images`, which counts items) are skipped for
Fuyu; these tests count patches instead."""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.generation_checks import GENERATION_MODES, assert_generate_matches_upstream
from support.references import SYSTEM, USER, Prompt, assert_same_steps, uncached_logits
from vlmprep.testing import IMAGE, VisionRunCounter

# Upstream's `generate` fails here: for beams and `num_return_sequences` it repeats `pixel_values` row by row as if
# each row were a prompt's, but a row is a patch, so its prefill finds placeholders and features that do not match
# ("Image features and image tokens do not match").
UPSTREAM_FAILS = ("beams", "return_two")


@pytest.mark.parametrize("mode", list(GENERATION_MODES))
def test_generate_matches_transformers_and_encodes_each_patch_once(mode):
    upstream, ours = model_pair("fuyu")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, IMAGE, [30]], image_seeds=[0, 1])
    kwargs = dict(max_new_tokens=4, output_logits=True, return_dict_in_generate=True, **GENERATION_MODES[mode])
    torch.manual_seed(1)
    with VisionRunCounter(ours) as runs:
        actual = ours.generate(**prompt.inputs(), **kwargs)
    if mode in UPSTREAM_FAILS:
        # Each expanded row's first step is the prompt's: upstream's uncached forward of the whole prompt.
        expected_first = uncached_logits(upstream, prompt.inputs())
        assert torch.allclose(actual.logits[0], expected_first.expand_as(actual.logits[0]), atol=1e-5)
    else:
        torch.manual_seed(1)
        expected = upstream.generate(**prompt.inputs(), **kwargs)
        assert torch.equal(actual.sequences, expected.sequences)
        assert_same_steps(actual.logits, expected.logits)
    patches = prompt.inputs()["pixel_values"].shape[0]
    assert runs.calls == 1 and runs.images == patches  # one batched call, each patch once (beams share them)


def test_image_already_in_the_encoder_cache_is_not_encoded_again():
    upstream, ours = model_pair("fuyu")
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30]], image_seeds=[2])
    ours.generate(**first.inputs(), max_new_tokens=1, do_sample=False)
    second = Prompt(ours.config, [USER, IMAGE, [31], IMAGE, [32]], image_seeds=[2, 3])
    with VisionRunCounter(ours) as runs:
        assert_generate_matches_upstream(upstream, ours, second.inputs(), "greedy", max_new_tokens=2)
    new_patches = Prompt(ours.config, [IMAGE], image_seeds=[3]).inputs()["pixel_values"].shape[0]
    assert runs.calls == 1 and runs.images == new_patches  # only the new image's patches
