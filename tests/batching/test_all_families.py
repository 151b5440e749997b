"""Every family of the conformance suite in the engine: answers equal the plain class's `generate`, or a clear refusal.

Slow (one tiny model per family, about 3 minutes on 2 cores): `make test-slow`, or `pytest -m slow` on this file.
"""

from __future__ import annotations

from itertools import groupby

import pytest
from cb_models import assert_matches_reference, cb_pair, engine_config, greedy
from test_families import family_requests

from support.registry import FAMILY_CASES
from support.traits import engine_refusal, facts, modality, refused_by_engine, tiny_config


def _prompt_ids(request) -> list[int]:
    return request if isinstance(request, list) else request["input_ids"][0].tolist()


def batch_budget(family: str, requests: list) -> int:
    """Tokens a step holds: 8, so that prompts are cut across steps, and more where a step holds a bidirectional image
    block whole (Gemma3's 16-token images): the longest block and 4 tokens, which still splits its prompts and moves
    cuts that fall inside images back to the image start."""
    if not facts(family).bidirectional:
        return 8
    placeholder = modality(family, "image").placeholder_id(tiny_config(family))
    longest = max(
        (len(list(run)) for ids in map(_prompt_ids, requests) for token, run in groupby(ids) if token == placeholder),
        default=0,
    )
    return max(8, longest + 4)


def cache_pages(requests: list) -> int:
    """Pages of the engine's cache (4 tokens each): 128, or a page per prompt token where the prompts hold more
    (DeepSeek-OCR-2's views fill 144 placeholders each, whatever the config)."""
    return max(128, sum(len(_prompt_ids(request)) for request in requests))


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILY_CASES))
def test_family_in_the_engine(family):
    upstream, ours = cb_pair(family)
    requests = family_requests(upstream, family)
    # Families the engine cannot run exactly, and the words of the error that says why (for text requests too)
    if refused_by_engine(family):
        with pytest.raises(ValueError, match=engine_refusal(family)):
            ours.generate_batch(requests, generation_config=greedy(2), progress_bar=False)
        return
    outputs = ours.generate_batch(
        requests,
        generation_config=greedy(4),
        continuous_batching_config=engine_config(
            max_batch_tokens=batch_budget(family, requests), num_blocks=cache_pages(requests)
        ),
        progress_bar=False,
    )
    for request, output in zip(requests, outputs.values(), strict=True):
        # A family whose image indicator tokens every forward with images embeds (Ovis2) has its requests with images
        # refused one by one (each fails alone); its text requests run
        if ours.item_independent_encoder_fields("image") and not isinstance(request, list):
            assert "image indicator tokens" in output.error, output.error
            continue
        assert_matches_reference(upstream, request, output, 4)
