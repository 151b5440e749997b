"""Cosmos3 Omni, Inkling and Nemotron-H Omni in transformers' continuous-batching engine: each request equals its
own upstream generate (or the family is refused, with why)."""

from __future__ import annotations

import pytest
from cb_models import (
    assert_engine_matches_references,
    cb_pair,
    greedy,
)

from support.references import VIDEO
from support.registry import FAMILY_CASES
from support.traits import engine_refusal, families_with, has_state_layers, takes
from vlmprep.testing import AUDIO, IMAGE

MAX_NEW_TOKENS = 4


# Slow: Cosmos3 Omni's engine path is Qwen3-VL's (its layout, deepstack rows), which tests/batching/test_families.py
# runs in the default suite.
@pytest.mark.slow
@pytest.mark.parametrize("family", ["cosmos3_omni"])
def test_images_and_videos_in_small_steps(family):
    # A budget of 8 tokens cuts prompts and items across steps; the second request repeats the first one's video
    upstream, ours = cb_pair(family)
    build = FAMILY_CASES[family].build_inputs
    requests = [
        build(upstream.config, [[3, 4], IMAGE, [5], VIDEO, [6]], [1, 2]),
        build(upstream.config, [[8], VIDEO], [2]),
    ]
    assert_engine_matches_references(upstream, ours, requests, MAX_NEW_TOKENS, 8)


@pytest.mark.parametrize("family", families_with(has_state_layers, takes("image"), takes("audio")))
def test_decoders_with_recurrent_states_are_refused_clearly(family):
    # Inkling's short convolutions and Nemotron-H's mamba layers hold states: the engine's paged cache holds KV only
    upstream, ours = cb_pair(family)
    build = FAMILY_CASES[family].build_inputs
    requests = [build(upstream.config, [[3, 4], IMAGE, [5], AUDIO, [6]], [1, 2]), [7, 8, 9]]
    with pytest.raises(ValueError, match=engine_refusal(family)):
        ours.generate_batch(requests, generation_config=greedy(2), progress_bar=False)
