"""Every family of the conformance suite in the engine: answers equal the plain class's `generate`, or a clear refusal.

Slow (one tiny model per family, about 3 minutes on 2 cores): `make test-slow`, or `pytest -m slow` on this file.
"""

from __future__ import annotations

import pytest
from cb_models import assert_matches_reference, cb_pair, engine_config, greedy
from test_families import family_requests

from support.registry import FAMILY_CASES
from support.traits import engine_refusal, refused_by_engine

# A step holds a bidirectional image block whole: Gemma3's 16-token images need a budget of at least 16 (20 still
# splits its prompts, and moves cuts that fall inside images back to the image start).
BUDGETS = {"gemma3": 20}
# Pages of the engine's cache: DeepSeek-OCR-2's views fill 144 placeholders each (whatever the config), so its requests
# of two images need more than the 128 pages of 4 tokens the other families' fit in.
PAGES = {"deepseek_ocr2": 512}


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
            max_batch_tokens=BUDGETS.get(family, 8), num_blocks=PAGES.get(family, 128)
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
