"""Prefix sharing in the engine keys blocks on image content: the same image shares KV, a different one never does."""

from __future__ import annotations

import torch
from cb_models import TokensFed, engine_config, greedy, llava_cb_pair, wait_for
from cb_references import assert_matches_reference, image_run, pixels

NEW_TOKENS = 3
DECODE_STEPS = NEW_TOKENS - 1  # the first token comes from the last prefill slice


def test_blocks_are_shared_by_image_content():
    upstream, ours = llava_cb_pair()
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, *image_run(ours), 9, 10, 11]  # 27 tokens: 6 whole pages of 4 before the last
    manager = ours.init_continuous_batching(
        generation_config=greedy(NEW_TOKENS), continuous_batching_config=engine_config(max_batch_tokens=64)
    )
    fed = TokensFed(ours)
    manager.start()
    try:

        def run(pixel_values, salt=None):
            request_id = manager.add_request(prompt, pixel_values=pixel_values, cache_salt=salt)
            output = wait_for(manager, request_id)
            assert_matches_reference(upstream, {"input_ids": prompt, "pixel_values": pixel_values}, output, NEW_TOKENS)
            return fed.take() - DECODE_STEPS

        assert run(pixels(1)) == 27  # nothing to share yet
        assert run(pixels(1)) == 3  # the same image: its 6 pages are shared, the last 3 tokens computed
        assert run(pixels(2)) == 19  # another image behind the same placeholders: only the 2 text pages are shared
        assert run(pixels(1), salt="tenant-b") == 19  # another salt: the image's pages are not shared across salts
        # The engine's counters (what `vlmprep serve` reports) say the same as the tokens the model was fed
        stats = manager.prefill_stats
        assert (stats.requests, stats.prompt_tokens) == (4, 4 * 27)
        assert (stats.tokens_prefilled, stats.tokens_shared) == (27 + 3 + 19 + 19, 4 * 27 - (27 + 3 + 19 + 19))
    finally:
        fed.remove()
        manager.stop(block=True)


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
    manager = ours.init_continuous_batching(
        generation_config=greedy(NEW_TOKENS), continuous_batching_config=engine_config(max_batch_tokens=64)
    )
    fed = TokensFed(ours)
    manager.start()
    try:

        def run(request, reference) -> int:
            output = wait_for(manager, manager.add_request(dict(request)))
            assert_matches_reference(reference, request, output, NEW_TOKENS)
            return fed.take() - DECODE_STEPS

        assert [run(request, upstream) for request in requests] == [27, 13]
        assert [run(request, upstream) for request in requests] == [3, 1]  # shared under the same weights
        ours.load_state_dict(changed)
        assert [run(request, reloaded) for request in requests] == [27, 13]  # nothing shared across the reload
        assert [run(request, reloaded) for request in requests] == [3, 1]  # the reloaded weights' pages are shared
    finally:
        fed.remove()
        manager.stop(block=True)
