"""Families beyond LLaVA in the engine: multimodal positions and deepstack rows (Qwen-VL), positions counted from the
cache (EXAONE 4.5, HyperCLOVAX), videos, and the families refused, with why."""

from __future__ import annotations

import pytest
import torch
from cb_models import (
    assert_engine_matches_references,
    cb_pair,
    engine_config,
    greedy,
    one_by_one,
)
from cb_references import reference_logprobs, reference_tokens

from support.references import VIDEO
from support.registry import FAMILY_CASES
from support.traits import (
    families_with,
    has_deepstack,
    has_layout,
    has_multimodal_rope,
    not_,
    refused_by_engine,
    takes,
    videos_behind_image_placeholders,
)
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


# Families that need more than the placeholders' feature rows: multimodal rotary positions per request (Qwen-VL),
# per-layer deepstack rows at the same placeholders (Qwen3-VL), decoders that number tokens by cache length (EXAONE 4.5,
# HyperCLOVAX: the engine's positions are each request's own, which is what that count gives an unpadded prompt).
BEYOND_ROWS = families_with(
    not_(refused_by_engine),
    takes("image"),
    lambda family: (
        has_multimodal_rope(family) or has_deepstack(family) or has_layout("patch_grid_text_positions")(family)
    ),
)
# Videos with what they come with: Qwen2.5-VL's `second_per_grid_ts` (the Qwen2.5-Omni thinker's
# `video_second_per_grid`; the family cases draw 1 or 2 seconds per seed), VideoLLaMA3's compression mask (one run per
# frame of the rows it keeps), Video-LLaVA's one run per video, ...
# (GLM's video frames are image placeholders: as upstream, a request holds images or a video, never both)
WITH_VIDEOS = families_with(not_(refused_by_engine), takes("video"), not_(videos_behind_image_placeholders))


@pytest.mark.parametrize("family", BEYOND_ROWS)
@pytest.mark.parametrize("max_batch_tokens", [5, 8, 64], ids=["budget5", "budget8", "budget64"])
def test_image_requests_equal_generate(family, max_batch_tokens):
    # Budgets of 5 and 8 tokens cut the 9- and 17-token prompts across steps, and their images across slices
    upstream, ours = cb_pair(family)
    requests = family_requests(upstream, family)
    assert_engine_matches_references(upstream, ours, requests, MAX_NEW_TOKENS, max_batch_tokens)


@pytest.mark.parametrize("family", WITH_VIDEOS)
def test_images_and_videos(family):
    # Qwen3-VL merges the image and video deepstack rows of a forward by placeholder position: a step may hold both.
    # The text request generates a placeholder id under some families' weights (Muse Spark's audio id), fed back while
    # the others' items prefill: it is embedded as `generate`'s decoding embeds it (Muse Spark: as id 0)
    upstream, ours = cb_pair(family)
    build = FAMILY_CASES[family].build_inputs
    requests = [
        build(upstream.config, [[3, 4], IMAGE, [5], VIDEO, [6], IMAGE, [7]], [1, 2, 3]),
        build(upstream.config, [[8], VIDEO, [9, 10]], [2]),  # the first request's video
        [11, 12, 13],
    ]
    assert_engine_matches_references(upstream, ours, requests, MAX_NEW_TOKENS, 8)


@pytest.mark.parametrize("family", families_with(not_(refused_by_engine), has_deepstack, takes("video")))
def test_generated_placeholder_ids_next_to_deepstack_rows(family):
    # Text prompts answered with the image or the video placeholder id decode it as text while another request's
    # image prefill runs in the same steps: their rows are their text embeddings, their deepstack rows zeros.
    upstream, ours = cb_pair(family)
    prompts = torch.tensor([[a, b] for a in range(1, 100) for b in range(1, 100)])  # text ids only
    with torch.no_grad():
        answers = upstream(input_ids=prompts).logits[:, -1].argmax(-1)
    chosen = [
        prompts[answers == token].tolist()[:1]
        for token in (upstream.config.image_token_id, upstream.config.video_token_id)
    ]
    assert all(chosen), "no two-token prompt is answered with a placeholder id under these weights"
    build = FAMILY_CASES[family].build_inputs
    image_request = build(upstream.config, [[3], IMAGE, [4], IMAGE, [5], IMAGE, [6]], [1, 2, 3])
    requests = [*chosen[0], *chosen[1], image_request]
    outputs = assert_engine_matches_references(upstream, ours, requests, MAX_NEW_TOKENS, 8)
    assert [outputs[f"req_{i}"].generated_tokens[0] for i in (0, 1)] == [
        upstream.config.image_token_id,
        upstream.config.video_token_id,
    ]


def frame_spacings(upstream) -> tuple[dict, dict]:
    """One Qwen2.5-VL video request at two frame spacings (`second_per_grid_ts`), which space the video's positions
    and so change the answer's log-probabilities (checked here, so the tests below can fail)."""
    build = FAMILY_CASES["qwen2_5_vl"].build_inputs
    one = build(upstream.config, [[3, 4, 5, 6, 7, 8, 9, 10], VIDEO, [6, 7, 8, 9, 10, 11, 12]], [2])
    four = {**one, "second_per_grid_ts": one["second_per_grid_ts"] * 4}
    first = reference_tokens(upstream, one, 1)
    assert (reference_logprobs(upstream, one, first) - reference_logprobs(upstream, four, first)).abs().max() > 1e-5
    return one, four


def test_video_frame_spacing_travels_with_the_request():
    # Straight from the processor, `second_per_grid_ts` was refused ("Unknown request inputs"). The second request's
    # video differs from the first's only by its spacing: its pages are not shared (only the 8 text tokens before it,
    # and the video-start token after them, the head of a page of the first request)
    upstream, ours = cb_pair("qwen2_5_vl")
    one, four = frame_spacings(upstream)
    with one_by_one(ours, max_new_tokens=3) as run:
        assert [run(upstream, request) for request in (one, four, one)] == [25, 16, 1]


def test_paged_generate_passes_the_frame_spacing():
    # `generate(..., cache_implementation="paged")` ignored `second_per_grid_ts`: each row's request now carries its
    # videos' spacings, and its positions are upstream's `get_rope_index` of the row with them
    upstream, ours = cb_pair("qwen2_5_vl")
    one, four = frame_spacings(upstream)
    rows = torch.cat([one["input_ids"], four["input_ids"]])
    inputs = {key: torch.cat([one[key], four[key]]) for key in one if key != "input_ids"}
    prompts = ours._rows_as_prompts(rows, dict(inputs), None)
    for prompt, request in zip(prompts, (one, four), strict=True):
        expected, _ = upstream.model.get_rope_index(
            request["input_ids"],
            mm_token_type_ids=request["mm_token_type_ids"],
            video_grid_thw=request["video_grid_thw"],
            second_per_grid_ts=request["second_per_grid_ts"],
        )
        assert torch.equal(prompt.items.positions[1:], expected[:, 0])
    sequences = ours.generate(
        input_ids=rows,
        **inputs,
        cache_implementation="paged",
        max_new_tokens=4,
        do_sample=False,
        continuous_batching_config=engine_config(max_batch_tokens=64),
    )
    for row, request in enumerate((one, four)):
        assert sequences[0, row, -4:].tolist() == reference_tokens(upstream, request, 4)


def test_paligemma_is_refused_even_for_text():
    # PaliGemma's prefix is bidirectional in every prompt, images or not
    upstream, ours = cb_pair("paligemma")
    with pytest.raises(ValueError, match="attends bidirectionally"):
        ours.generate_batch([[3, 4, 5]], generation_config=greedy(2), progress_bar=False)
    with pytest.raises(ValueError, match="attends bidirectionally"):
        ours.init_continuous_batching(generation_config=greedy(2))
