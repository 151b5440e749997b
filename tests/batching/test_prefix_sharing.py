"""Prefix sharing in the engine keys blocks on image content: the same image shares KV, a different one never does."""

from __future__ import annotations

import torch
from cb_models import llava_cb_pair, one_by_one
from cb_references import image_run, pixels

NEW_TOKENS = 3


def test_blocks_are_shared_by_image_content():
    upstream, ours = llava_cb_pair()
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, *image_run(ours), 9, 10, 11]  # 27 tokens: 6 whole pages of 4 before the last
    with one_by_one(ours, NEW_TOKENS) as run_request:

        def run(pixel_values, salt=None):
            return run_request(upstream, {"input_ids": prompt, "pixel_values": pixel_values}, cache_salt=salt)

        assert run(pixels(1)) == 27  # nothing to share yet
        assert run(pixels(1)) == 3  # the same image: its 6 pages are shared, the last 3 tokens computed
        assert run(pixels(2)) == 19  # another image behind the same placeholders: only the 2 text pages are shared
        assert run(pixels(1), salt="tenant-b") == 19  # another salt: the image's pages are not shared across salts
        # The engine's counters (what `vlmprep serve` reports) say the same as the tokens the model was fed
        stats = run_request.manager.prefill_stats
        assert (stats.requests, stats.prompt_tokens) == (4, 4 * 27)
        assert (stats.tokens_prefilled, stats.tokens_shared) == (27 + 3 + 19 + 19, 4 * 27 - (27 + 3 + 19 + 19))


def test_no_page_is_shared_across_a_weight_reload():
    # A manager kept alive across a weight reload: pages of the old weights (image and text alike) are not shared with
    # requests after it, whose answers are the reloaded plain class's
    upstream, shared_model = llava_cb_pair()
    ours = type(shared_model)(upstream.config).eval()  # reloaded below: not the session's pair
    ours.load_state_dict(upstream.state_dict())
    reloaded = type(upstream)(upstream.config).eval()
    generator = torch.Generator().manual_seed(1)
    changed = {
        key: value + 0.05 * torch.randn(value.shape, generator=generator) if value.is_floating_point() else value
        for key, value in upstream.state_dict().items()
    }
    reloaded.load_state_dict(changed)
    image_prompt = [1, 2, 3, 4, 5, 6, 7, 8, *image_run(ours), 9, 10, 11]  # 27 tokens: 6 whole pages before the last
    text_prompt = list(range(21, 34))  # 13 tokens: 3 whole pages before the last
    requests = [{"input_ids": image_prompt, "pixel_values": pixels(1)}, {"input_ids": text_prompt}]
    with one_by_one(ours, NEW_TOKENS) as run:
        assert [run(upstream, request) for request in requests] == [27, 13]
        assert [run(upstream, request) for request in requests] == [3, 1]  # shared under the same weights
        ours.load_state_dict(changed)
        assert [run(reloaded, request) for request in requests] == [27, 13]  # nothing shared across the reload
        assert [run(reloaded, request) for request in requests] == [3, 1]  # the reloaded weights' pages are shared
