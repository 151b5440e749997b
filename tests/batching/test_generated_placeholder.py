"""Granite 4 Vision zeroes every placeholder's embedding in a forward that feeds images: a request that generates the
placeholder id in a step feeding another request's images cannot keep its text embedding, and the step's requests
fail with an error that says so, rather than answer wrong."""

from __future__ import annotations

from cb_models import cb_pair, engine_config, greedy

from support.registry import FAMILY_CASES
from vlmprep.testing import IMAGE


def test_generated_placeholder_next_to_images_fails_clearly():
    upstream, ours = cb_pair("granite4_vision")
    placeholder = upstream.config.image_token_id
    config = greedy(4)
    config.suppress_tokens = [token for token in range(upstream.config.text_config.vocab_size) if token != placeholder]
    with_image = FAMILY_CASES["granite4_vision"].build_inputs(upstream.config, [[3, 4, 5], IMAGE, [6, 7]], [2])
    outputs = ours.generate_batch(
        [[8, 9, 10], with_image],  # the text request decodes the placeholder id while the image is prefilled
        generation_config=config,
        continuous_batching_config=engine_config(max_batch_tokens=8),
        progress_bar=False,
    )
    errors = [output.error or "" for output in outputs.values()]
    assert any("generated the image placeholder token" in error for error in errors), errors
