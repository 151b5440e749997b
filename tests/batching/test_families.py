"""Families beyond LLaVA in the engine: multimodal rotary positions (Qwen-VL), and the families refused, with why."""

from __future__ import annotations

import pytest
from cb_models import assert_matches_reference, cb_pair, engine_config, greedy
from transformers.generation.continuous_batching.requests import RequestStatus

from family_registry import FAMILY_CASES
from vlmprep.testing import IMAGE

MAX_NEW_TOKENS = 5


def family_requests(upstream, family: str) -> list:
    """0, 1 and 2 images per request (different sizes), an image shared by two requests, a plain list."""
    build = FAMILY_CASES[family].build_inputs
    config = upstream.config
    return [
        build(config, [[3, 4, 5], IMAGE, [6, 7]], [1]),
        [8, 9, 10, 11],
        build(config, [[3], IMAGE, [12], IMAGE, [13, 14]], [2, 3]),
        build(config, [[15, 16], IMAGE, [17]], [1]),
    ]


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
@pytest.mark.parametrize("max_batch_tokens", [8, 64], ids=["budget8", "budget64"])
def test_multimodal_positions_per_request(family, max_batch_tokens):
    upstream, ours = cb_pair(family)
    requests = family_requests(upstream, family)
    outputs = ours.generate_batch(
        requests,
        generation_config=greedy(MAX_NEW_TOKENS),
        continuous_batching_config=engine_config(max_batch_tokens=max_batch_tokens),
        progress_bar=False,
    )
    for request, output in zip(requests, outputs.values(), strict=True):
        assert_matches_reference(upstream, request, output, MAX_NEW_TOKENS)


def assert_image_requests_refused(upstream, requests, outputs, reason: str, max_new_tokens: int) -> None:
    """Requests with images failed alone, saying why; text-only requests answered as the plain class."""
    for request, output in zip(requests, outputs.values(), strict=True):
        if isinstance(request, list):
            assert_matches_reference(upstream, request, output, max_new_tokens)
        else:
            assert output.status == RequestStatus.FAILED and reason in output.error, output.error


def test_gemma3_image_requests_are_refused_and_text_requests_run_as_upstream():
    # The engine's paged masks are causal: Gemma3's bidirectional image blocks cannot be built, its text can
    upstream, ours = cb_pair("gemma3")
    requests = family_requests(upstream, "gemma3")
    outputs = ours.generate_batch(
        requests, generation_config=greedy(2), continuous_batching_config=engine_config(), progress_bar=False
    )
    assert_image_requests_refused(upstream, requests, outputs, "attends bidirectionally inside each image block", 2)
    manager = ours.init_continuous_batching(generation_config=greedy(2), continuous_batching_config=engine_config())
    with pytest.raises(ValueError, match="attends bidirectionally"):
        manager.add_request(requests[0])


def test_paligemma_is_refused_even_for_text():
    # PaliGemma's prefix is bidirectional in every prompt, images or not
    upstream, ours = cb_pair("paligemma")
    with pytest.raises(ValueError, match="attends bidirectionally"):
        ours.generate_batch([[3, 4, 5]], generation_config=greedy(2), progress_bar=False)
    with pytest.raises(ValueError, match="attends bidirectionally"):
        ours.init_continuous_batching(generation_config=greedy(2))
