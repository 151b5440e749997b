"""A request that generates a placeholder id in an engine step feeding another request's images.

Granite 4 Vision zeroes every placeholder's embedding in a forward that feeds images: the generated id cannot keep its
text embedding, and the step's requests fail with an error that says so, rather than answer wrong. A family whose
forward embeds every placeholder as one other id (Muse Spark) gets that id's embedding, as `generate`'s decoding does.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from cb_models import assert_matches_reference, cb_pair, engine_config, greedy, run_engine

from support.registry import FAMILY_CASES
from support.traits import facts, families_with, not_, refused_by_engine
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


def embeds_placeholders_as_another_id(family: str) -> bool:
    """The family's forward embeds every placeholder as one other id (`placeholders_embedded_as`: Muse Spark's 0)."""
    return any(
        modality.placement is not None and modality.placement.placeholders_embedded_as is not None
        for modality in facts(family).modalities
    )


def prompt_answered_with(model, token_id: int) -> list[int]:
    """A three-token text prompt whose greedy answer starts with `token_id`: searched over prompts of text ids in one
    batched forward of the tiny model (none found: the test cannot show anything under these weights)."""
    texts = torch.tensor(list(itertools.product(range(3, 100), repeat=2)))
    prompts = torch.cat([torch.full((len(texts), 1), 8), texts], dim=1)
    with torch.no_grad():
        logits = model(input_ids=prompts, use_cache=False).logits[:, -1]
    found = (logits.argmax(-1) == token_id).nonzero()
    assert len(found), f"no prompt of the tiny model answers {token_id}: pick other text ids"
    return prompts[found[0, 0]].tolist()


@pytest.mark.parametrize("family", families_with(not_(refused_by_engine), embeds_placeholders_as_another_id))
def test_generated_placeholder_next_to_images_is_embedded_as_generate_decodes_it(family):
    """A text request generates the image placeholder id while another request's image prefills in the same step: the
    engine embeds it as `generate`'s decoding does (the family's one id for every placeholder), so both answers are
    transformers' own."""
    upstream, ours = cb_pair(family)
    text = prompt_answered_with(upstream, upstream.config.image_token_id)
    with_image = FAMILY_CASES[family].build_inputs(upstream.config, [[3, 4, 5], IMAGE, [6, 7]], [2])
    requests = [text, with_image]
    outputs = run_engine(ours, requests, max_new_tokens=4, max_batch_tokens=8)
    assert list(outputs.values())[0].generated_tokens[0] == upstream.config.image_token_id
    for request, output in zip(requests, outputs.values(), strict=True):
        assert_matches_reference(upstream, request, output, max_new_tokens=4)
