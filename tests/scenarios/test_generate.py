"""Plain `generate`: the same tokens and logits as transformers, one vision run per call, no state on the model.

Every family runs the conformance scenarios (`@scenario`); the Qwen-like families add videos next to images and
M-RoPE positions that upstream keeps on the model between calls; the GLM families, whose upstream beams repeat
features image by image, are checked greedy and sampling against transformers and beams against uncached forwards.
"""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from conftest import model_pair
from support.generation_checks import (
    GENERATION_MODES,
    assert_beams_exact_where_upstream_reorders_images,
    assert_generate_matches_upstream,
)
from support.references import (
    SYSTEM,
    USER,
    Prompt,
    assert_close,
    assert_same_steps,
    continued,
    generate_batch_matching_upstream,
    generate_logits,
    reference_next_logits,
    uncached_logits,
)
from support.registry import scenario
from support.traits import (
    attends_bidirectionally,
    families_with,
    forward_takes,
    qwen_like_prompts,
    sampled,
    videos_behind_image_placeholders,
)
from vlmprep.testing import IMAGE, VIDEO, VisionRunCounter


@pytest.mark.parametrize("mode", list(GENERATION_MODES))
@scenario
def test_generate_matches_transformers(family, mode):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, IMAGE, [30]])
    with VisionRunCounter(ours) as runs:
        assert_generate_matches_upstream(upstream, ours, prompt.inputs(), mode, max_new_tokens=4)
    assert runs.calls == 1 and runs.images == 2


@scenario
def test_left_padded_batch_matches_solo_runs(family):
    """Each row of the batch equals transformers on that row's prompt alone (uncached forwards), one vision run."""
    upstream, ours = model_pair(family)
    one = Prompt(ours.config, [SYSTEM, IMAGE, USER], image_seeds=[3])
    two = Prompt(ours.config, [[2, 50], IMAGE, [51], IMAGE, [52, 53]], image_seeds=[4, 5])
    with VisionRunCounter(ours) as runs:
        generate_batch_matching_upstream(upstream, ours, [one, two])
    assert runs.calls == 1 and runs.images == 3


@scenario
def test_interleaved_requests_share_no_state(family):
    """A turn 1, B turn 1, then A turn 2 from A's cache: positions and features come from A's prompt and cache."""
    upstream, ours = model_pair(family)
    turn_1 = [SYSTEM, IMAGE, USER]
    a_turn_1 = Prompt(ours.config, turn_1, image_seeds=[11])
    a_turn_2 = Prompt(ours.config, [*turn_1, [40, 41], IMAGE, [42]], image_seeds=[11, 13])
    b_turn_1 = Prompt(ours.config, [[2, 60], IMAGE, [61, 62], IMAGE, [63]], image_seeds=[12, 14])
    a_cache = DynamicCache(config=ours.config)
    generate_logits(ours, a_turn_1.inputs(), cache=a_cache, max_new_tokens=1)
    assert a_cache.get_seq_length() == a_turn_1.length  # one new token: prefill only, the cache holds the prompt
    generate_logits(ours, b_turn_1.inputs())
    _, logits = generate_logits(ours, a_turn_2.inputs(), cache=a_cache)
    _, expected_logits = generate_logits(upstream, a_turn_2.inputs())
    assert_same_steps(logits, expected_logits)


@scenario
def test_save_pretrained_loads_in_transformers(family, tmp_path):
    """A drop-in's checkpoint is a transformers checkpoint: no missing or unexpected keys, same logits."""
    upstream, ours = model_pair(family)
    ours.save_pretrained(tmp_path)
    reloaded, info = type(upstream).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    with torch.no_grad():
        expected = upstream(**continued(prompt, [])).logits
        actual = reloaded.eval()(**continued(prompt, [])).logits
    assert_close(actual, expected)


# -- Token types left out: upstream's forward is then causal everywhere, and so is the drop-in's ----------------------


@pytest.mark.parametrize("family", families_with(sampled("foundation"), attends_bidirectionally))
def test_left_out_token_types_attend_causally_as_upstream(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    inputs = prompt.inputs()
    inputs.pop("token_type_ids")
    _, logits = generate_logits(ours, inputs, max_new_tokens=1)
    assert_close(logits[0], uncached_logits(upstream, inputs))  # one uncached forward of the plain class
    if family == "gemma3":
        # The processor's token types change these logits (a bidirectional image block): deriving them fails above.
        # (The tiny PaliGemma's last-token logits come out the same with its all-prefix token types.)
        assert not torch.allclose(logits[0], reference_next_logits(upstream, prompt), atol=1e-4)


@pytest.mark.parametrize("family", families_with(qwen_like_prompts))
def test_token_types_are_derived_when_left_out(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30], VIDEO, USER], image_seeds=[3, 4])
    inputs = prompt.inputs()
    inputs.pop("mm_token_type_ids")
    _, logits = generate_logits(ours, inputs, max_new_tokens=2)
    _, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    assert_same_steps(logits, expected_logits)


# -- Qwen-like families: no cache, and positions never read from the model -------------------------------------------


# `generate(use_cache=False)` does not extend `moe_mm_token_type_ids` over the generated tokens, in transformers as in
# the drop-in: the MoE's token-type mask is one token short (IndexError)
NO_CACHE_MOE_TOKEN_TYPES = pytest.mark.xfail(
    strict=True,
    raises=IndexError,
    reason="generate(use_cache=False) does not extend moe_mm_token_type_ids (transformers too): IndexError",
)


@pytest.mark.parametrize(
    "family",
    [
        pytest.param(
            family, marks=[NO_CACHE_MOE_TOKEN_TYPES] if forward_takes("moe_mm_token_type_ids")(family) else []
        )
        for family in families_with(qwen_like_prompts)
    ],
)
def test_generate_without_cache_matches_transformers(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, VIDEO, [30], IMAGE, USER], image_seeds=[1, 3])
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2, use_cache=False)
    _, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    assert_same_steps(logits, expected_logits)


def test_no_state_kept_on_the_model_between_requests():
    """Upstream continues a cached request with `rope_deltas` left by whichever request ran last; vlmprep never reads
    them: positions come from the prompt alone, so stale (even garbage) deltas change nothing."""
    upstream, ours = model_pair("qwen2_vl")
    turn_1 = [SYSTEM, IMAGE, USER]
    a_turn_1 = Prompt(ours.config, turn_1, image_seeds=[2])
    a_turn_2 = Prompt(ours.config, [*turn_1, [40, 41, 42]], image_seeds=[2])
    b_turn_1 = Prompt(ours.config, [[2, 60], IMAGE, [61], IMAGE, [62]], image_seeds=[4, 6])
    reference = reference_next_logits(upstream, a_turn_2)

    a_cache = DynamicCache(config=upstream.config)
    generate_logits(upstream, a_turn_1.inputs(), cache=a_cache, max_new_tokens=1)
    generate_logits(upstream, b_turn_1.inputs(), max_new_tokens=1)
    # Upstream fails on the cached image's pixels, so a caller continues with the text only
    turn_2_text = a_turn_2.inputs(with_pixels=False)
    _, upstream_logits = generate_logits(upstream, turn_2_text, cache=a_cache, max_new_tokens=1)
    assert not torch.allclose(upstream_logits[0], reference, atol=1e-4), "upstream reads B's rope_deltas"

    a_cache = DynamicCache(config=ours.config)
    generate_logits(ours, a_turn_1.inputs(), cache=a_cache, max_new_tokens=1)
    generate_logits(ours, b_turn_1.inputs(), max_new_tokens=1)
    ours.model.rope_deltas = torch.tensor([[1000], [-1000]])  # garbage: a broadcast error if it were read
    _, logits = generate_logits(ours, a_turn_2.inputs(), cache=a_cache, max_new_tokens=1)
    assert_close(logits[0], reference)
    # Written afterwards as upstream's generate writes it (code may read it), from this request's prompt
    assert ours.model.rope_deltas.flatten().tolist() != [1000, -1000]


# -- GLM families: video frames are image placeholders, told apart by `mm_token_type_ids` ---------------------------


@pytest.mark.parametrize("do_sample", [False, True])
@pytest.mark.parametrize("family", families_with(videos_behind_image_placeholders))
def test_glm_greedy_and_sampling_match_transformers(family, do_sample):
    """Images, then a video: one vision run each (GLM's tower sees a video as one grid row per frame)."""
    upstream, ours = model_pair(family)
    kwargs = {"max_new_tokens": 3, "do_sample": do_sample, "output_logits": True, "return_dict_in_generate": True}
    for segments, seeds in (([SYSTEM, IMAGE, USER, IMAGE, [30]], [0, 1]), ([SYSTEM, VIDEO, USER], [0])):
        prompt = Prompt(ours.config, segments, image_seeds=seeds)
        torch.manual_seed(1)
        expected = upstream.generate(**prompt.inputs(), **kwargs)
        torch.manual_seed(1)
        saved, ours.encoder_cache = ours.encoder_cache, None  # count real encoder runs
        try:
            with VisionRunCounter(ours) as runs:
                actual = ours.generate(**prompt.inputs(), **kwargs)
        finally:
            ours.encoder_cache = saved
        assert torch.equal(actual.sequences, expected.sequences)
        assert_same_steps(actual.logits, expected.logits)
        assert runs.calls == 1  # the two images in one call, or the video


@pytest.mark.parametrize("family", families_with(videos_behind_image_placeholders))
def test_glm_beams_are_exact_where_upstream_reorders_images(family):
    assert_beams_exact_where_upstream_reorders_images(*model_pair(family), "A, A, A, B, B, B")
