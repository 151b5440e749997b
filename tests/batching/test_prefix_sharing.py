"""Prefix sharing in the engine keys blocks on image content: the same image shares KV, a different one never does."""

from __future__ import annotations

import torch
from cb_models import greedy, llava_cb_pair, one_by_one
from cb_references import image_run, pixels

NEW_TOKENS = 3


def test_blocks_are_shared_by_image_content():
    upstream, ours = llava_cb_pair()
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, *image_run(ours), 9, 10, 11]  # 27 tokens: 6 whole pages of 4 before the last
    with one_by_one(ours, NEW_TOKENS) as run_request:

        def run(pixel_values, salt=None):
            return run_request(upstream, {"input_ids": prompt, "pixel_values": pixel_values}, cache_salt=salt)

        assert run(pixels(1)) == 27  # nothing to share yet
        # The same image: its 6 pages are shared, and the head of the next one (the earlier request's 7th page, full
        # with its first answer token): only the last token is computed (whole pages alone computed 3)
        assert run(pixels(1)) == 1
        assert run(pixels(2)) == 19  # another image behind the same placeholders: only the 2 text pages are shared
        assert run(pixels(1), salt="tenant-b") == 19  # another salt: the image's pages are not shared across salts
        # The engine's counters (what `vlmprep serve` reports) say the same as the tokens the model was fed
        stats = run_request.manager.prefill_stats
        assert (stats.requests, stats.prompt_tokens) == (4, 4 * 27)
        assert (stats.tokens_prefilled, stats.tokens_shared) == (27 + 1 + 19 + 19, 4 * 27 - (27 + 1 + 19 + 19))


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
        assert [run(upstream, request) for request in requests] == [1, 1]  # shared under the same weights
        ours.load_state_dict(changed)
        assert [run(reloaded, request) for request in requests] == [27, 13]  # nothing shared across the reload
        assert [run(reloaded, request) for request in requests] == [1, 1]  # the reloaded weights' pages are shared


def test_a_continuation_shares_the_partly_filled_last_page():
    # A chat's next turn continues the last one's prompt and answer: the earlier request's last page, partly filled
    # when it finished, is shared too (whole pages alone would compute its 3 tokens again)
    upstream, ours = llava_cb_pair()
    first = list(range(21, 34))  # 13 tokens: 3 whole pages of 4, then 1 token
    with torch.no_grad():
        answer = upstream.generate(torch.tensor([first]), generation_config=greedy(NEW_TOKENS))[0, len(first) :]
    # 15 tokens were written: 3 whole pages, and the 4th holding the last prompt token and two answer tokens
    second = [*first, *answer[:2].tolist(), 40, 41, 42]
    with one_by_one(ours, NEW_TOKENS) as run:
        assert run(upstream, {"input_ids": first}) == 13
        assert run(upstream, {"input_ids": second}) == 3  # its own last 3 tokens
        stats = run.manager.prefill_stats
        assert (stats.tokens_prefilled, stats.tokens_shared) == (13 + 3, 15)
