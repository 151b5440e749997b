"""Every family of the conformance suite in the engine: answers equal the plain class's `generate`, or a clear refusal.

Slow (one tiny model per family, about 3 minutes on 2 cores): `make test-slow`, or `pytest -m slow` on this file.
"""

from __future__ import annotations

import pytest
from cb_models import assert_matches_reference, cb_pair, engine_config, greedy
from test_families import assert_image_requests_refused, family_requests

from family_registry import FAMILY_CASES

# Families the engine cannot run exactly with images, and the words of the error that says why. Their text-only
# requests run as upstream runs them, except where the engine cannot run the family's text either.
REFUSED_EVEN_FOR_TEXT = {"paligemma", "lfm2_vl", "lfm3_vl"}
REFUSED = {
    "gemma3": "attends bidirectionally",
    "paligemma": "attends bidirectionally",
    "lfm2_vl": "paged cache does not hold",
    "lfm3_vl": "paged cache does not hold",
}


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILY_CASES))
def test_family_in_the_engine(family):
    upstream, ours = cb_pair(family)
    requests = family_requests(upstream, family)
    if family in REFUSED_EVEN_FOR_TEXT:
        with pytest.raises(ValueError, match=REFUSED[family]):
            ours.generate_batch(requests, generation_config=greedy(2), progress_bar=False)
        return
    if family in REFUSED:
        outputs = ours.generate_batch(
            requests, generation_config=greedy(2), continuous_batching_config=engine_config(), progress_bar=False
        )
        assert_image_requests_refused(upstream, requests, outputs, REFUSED[family], 2)
        return
    outputs = ours.generate_batch(
        requests,
        generation_config=greedy(4),
        continuous_batching_config=engine_config(max_batch_tokens=8),
        progress_bar=False,
    )
    for request, output in zip(requests, outputs.values(), strict=True):
        assert_matches_reference(upstream, request, output, 4)
