"""Every family of the conformance suite in the engine: answers equal the plain class's `generate`, or a clear refusal.

Slow (one tiny model per family, about 3 minutes on 2 cores): `make test-slow`, or `pytest -m slow` on this file.
"""

from __future__ import annotations

import pytest
from cb_models import assert_matches_reference, cb_pair, engine_config, greedy
from test_families import family_requests

from support.registry import FAMILY_CASES

# Families the engine cannot run exactly, and the words of the error that says why (for text requests too).
REFUSED = {
    "paligemma": "attends bidirectionally over its whole prefix",
    "lfm2_vl": "paged cache does not hold",
    "lfm3_vl": "paged cache does not hold",
    "nemotron_h_omni": "paged cache does not hold",
    "glm5_next": "paged cache does not hold",
    "dots3_note": "paged cache does not hold",
    "inkling2": "paged cache does not hold",
    "inkling2_loop": "paged cache does not hold",
    "inkling_mm_model": "paged cache does not hold",
    "qwen3_5": r"\['linear_attention'\] layers, which transformers' paged cache does not hold",
    "qwen3_5_moe": r"\['linear_attention'\] layers, which transformers' paged cache does not hold",
    "mistral_large4": "paged cache does not hold",
    "hy_v4_vl": "paged cache does not hold",
    "minimax_m3_vl": r"\['minimax_m3_sparse'\] layers, which transformers' paged cache does not hold",
    "qwen4_exp": r"\['indexed_attention', 'linear_attention'\] layers, which transformers' paged cache does not hold",
    "minicpmv4_6": r"\['linear_attention'\] layers, which transformers' paged cache does not hold",
    "minicpmv4_7": r"\['linear_attention'\] layers, which transformers' paged cache does not hold",
    "minicpm_ocr": r"\['linear_attention'\] layers, which transformers' paged cache does not hold",
    "kimi_k25": "latent attention",
    "gemma4": r"layers differ in \['head_dim'\]",
    "ernie4_5_vl_moe": "moe_mm_token_type_ids",
    "blip-2": "not adapted to the continuous-batching engine",
    "instructblip": "not adapted to the continuous-batching engine",
    "molmo2": "forward reads `cache.is_initialized`",
    "unlimited_ocr": "reference sliding-window layers pin each prompt",
    "instructblipvideo": "not adapted to the continuous-batching engine",
    "ovis2_5": "embeds an item's start and end tokens only in a forward that feeds that item",
}
# Families whose requests with images the engine refuses one by one (each fails alone, with this error); their text
# requests run.
REFUSED_WITH_ITEMS = {"ovis2": "image indicator tokens"}
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
    if family in REFUSED:
        with pytest.raises(ValueError, match=REFUSED[family]):
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
        if family in REFUSED_WITH_ITEMS and not isinstance(request, list):  # a request with images
            assert REFUSED_WITH_ITEMS[family] in output.error, output.error
            continue
        assert_matches_reference(upstream, request, output, 4)
