"""Situations from transformers' own model tests (GenerationTesterMixin, the VLM testers), drop-in vs upstream.

Each test reproduces the situation of an upstream test that failed with the drop-ins swapped in, and compares the
drop-in with the plain transformers class holding the same weights (issue 16).
"""

from __future__ import annotations

import copy
import tempfile

import pytest
import torch
import transformers
from transformers import CompileConfig, GenerationMixin

import vlmprep
from conftest import model_pair
from support.caller_caches import cache_of
from support.references import (
    NO_SPECIAL_TOKENS,
    SYSTEM,
    USER,
    Prompt,
    assert_same_steps,
    assert_steps_match_upstream,
    generate_logits,
)
from support.traits import families_with, has_multimodal_rope, not_, sampled
from vlmprep.testing import IMAGE, PrefillCounter, VisionRunCounter, tiny_gemma3_config
from vlmprep.utils._compat import method_problems


def _image_sensitive(model: torch.nn.Module) -> torch.nn.Module:
    # Upstream init zeroes Gemma3's projector: images would never reach the logits and no test could fail.
    projector = getattr(getattr(model, "model", model), "multi_modal_projector", None)
    weight = getattr(projector, "mm_input_projection_weight", None)
    if weight is not None:
        with torch.no_grad():
            weight.normal_(std=0.5, generator=torch.Generator().manual_seed(0))
    return model


def _own_pair(config, upstream_class, drop_in_class):
    torch.manual_seed(0)
    directory = tempfile.mkdtemp(prefix="vlmprep-fidelity-")
    _image_sensitive(upstream_class(config)).save_pretrained(directory)
    return upstream_class.from_pretrained(directory).eval(), drop_in_class.from_pretrained(directory).eval()


def _tester_inputs(config, placeholders: int, batch_size: int = 2, length: int = 9, seed: int = 0) -> dict:
    # Like upstream's VLM testers: random ids, the first tokens of each row are the image's placeholders.
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 100, (batch_size, length), generator=generator)
    ids[:, :placeholders] = config.image_token_id
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": (ids == config.image_token_id).long(),
        "pixel_values": torch.randn(batch_size, 3, 16, 16, generator=generator),
    }


@pytest.fixture(scope="module")
def gemma3_two_token_pair():
    # `mm_tokens_per_image=2` is not a square: the projector pools to int(sqrt(2))**2 = 1 token per image.
    config = tiny_gemma3_config(mm_tokens_per_image=2)
    return _own_pair(config, transformers.Gemma3ForConditionalGeneration, vlmprep.Gemma3ForConditionalGeneration)


# -- 1. Gemma3 with a non-square `mm_tokens_per_image` --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["greedy", "beams", "logits_to_keep"])
def test_gemma3_token_count_comes_from_the_projector(gemma3_two_token_pair, mode):
    upstream, ours = gemma3_two_token_pair
    inputs = _tester_inputs(ours.config, placeholders=1)
    kwargs = {"num_beams": 2} if mode == "beams" else {}
    if mode == "logits_to_keep":
        kwargs["logits_to_keep"] = 1
    expected_ids, expected = generate_logits(upstream, inputs, max_new_tokens=3, **kwargs)
    ours.encoder_cache.clear()
    with VisionRunCounter(ours) as runs:
        ids, logits = generate_logits(ours, inputs, max_new_tokens=3, **kwargs)
    assert runs.images == 2
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)


def test_gemma3_two_token_images_reach_the_logits(gemma3_two_token_pair):
    upstream, ours = gemma3_two_token_pair
    inputs = _tester_inputs(ours.config, placeholders=1)
    other = {**inputs, "pixel_values": inputs["pixel_values"].flip(0)}
    _, first = generate_logits(ours, inputs, max_new_tokens=1)
    _, second = generate_logits(ours, other, max_new_tokens=1)
    assert (first[0] - second[0]).abs().max() > 1e-3
    _, expected = generate_logits(upstream, other, max_new_tokens=1)
    assert_same_steps(second, expected)


# -- 2. Assisted decoding -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", families_with(sampled("mainstream")))
@pytest.mark.parametrize("assistant", ["prompt_lookup", "upstream_assistant", "drop_in_assistant"])
def test_assisted_decoding_with_images_matches_greedy(family, assistant):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, SYSTEM[:4]])
    expected_ids, expected = generate_logits(upstream, prompt.inputs(), max_new_tokens=6)
    if assistant == "prompt_lookup":
        kwargs = {"prompt_lookup_num_tokens": 3}
    else:
        kwargs = {"assistant_model": upstream if assistant == "upstream_assistant" else ours}
    with VisionRunCounter(ours) as runs:
        ids, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=6, **kwargs)
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)
    assert runs.calls == 1  # a drop-in assistant reads the main model's features: nothing is encoded twice


def _assistant_logits(main, assistant, inputs: dict) -> tuple[torch.Tensor, list[torch.Tensor]]:
    # The logits of every forward of the assistant (its drafts), and the main model's sequences.
    drafted = []
    hook = assistant.register_forward_hook(lambda module, args, output: drafted.append(output.logits[:, -1]))
    try:
        ids, _ = generate_logits(main, inputs, max_new_tokens=6, assistant_model=assistant)
    finally:
        hook.remove()
    return ids, drafted


@pytest.mark.parametrize("family", families_with(sampled("mainstream")))
def test_drop_in_assistant_of_a_transformers_main_model_drafts_as_transformers(family):
    # transformers' main model hands its assistant its encoder outputs, without the per-item inputs it encoded them
    # from (Qwen2-VL's grids), but with its positions: the drop-in drafts what a plain assistant drafts.
    upstream, ours = model_pair(family)
    plain_assistant = copy.deepcopy(upstream)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, SYSTEM[:4]])
    expected_ids, expected = _assistant_logits(upstream, plain_assistant, prompt.inputs())
    with VisionRunCounter(ours) as runs:
        ids, drafted = _assistant_logits(upstream, ours, prompt.inputs())
    assert torch.equal(ids, expected_ids)
    assert drafted and len(drafted) == len(expected)
    assert_same_steps(tuple(drafted), tuple(expected))
    assert runs.calls == 0  # the assistant reads the main model's features


@pytest.mark.parametrize("family", families_with(sampled("mainstream")))
@pytest.mark.parametrize("assistant", ["prompt_lookup", "upstream_assistant", "drop_in_assistant"])
def test_assisted_decoding_after_a_callers_cache_feeds_only_the_new_tokens(family, assistant):
    # transformers' assisted decoding feeds the whole prompt on top of a caller's cache (its first step is off by
    # 0.02-0.14 on these models); the drop-in feeds the tokens after the cache, as `_prefill` does.
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, SYSTEM[:4]])
    kwargs = {"prompt_lookup_num_tokens": 3}
    if assistant != "prompt_lookup":
        kwargs = {"assistant_model": upstream if assistant == "upstream_assistant" else ours}
    cache = cache_of(upstream, prompt.inputs(length=6, with_pixels=False))  # text only: the assistant has every image
    ids, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=4, cache=cache, **kwargs, **NO_SPECIAL_TOKENS)
    assert_steps_match_upstream(upstream, prompt, ids[0, prompt.length :], logits)


def test_drop_in_assistant_refuses_clearly_when_the_main_cache_holds_an_image():
    # The drop-in assistant reads the main model's features, which leave out images inside the main model's cache.
    upstream, ours = model_pair("llava")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, SYSTEM[:4]])
    cache = cache_of(upstream, prompt.inputs(length=prompt.length - 3))
    with pytest.raises(ValueError, match="vlmprep assistant .* leave out the 1 item"):
        ours.generate(**prompt.inputs(), cache=cache, assistant_model=ours, max_new_tokens=2, do_sample=False)


@pytest.mark.parametrize("assistant", ["prompt_lookup", "drop_in_assistant"])
def test_paligemma_assisted_decoding_drafts_are_suffix_tokens(assistant):
    # Assisted decoding's first forward holds the prompt and the drafts; transformers 5.24 types the drafts as the
    # prompt's last token (0: PaliGemma's bidirectional prefix), so the prompt attends to them and the first step is
    # off. Drafts are generated tokens, causal suffix (1): the reference is one uncached forward of prompt and answer.
    upstream, ours = model_pair("paligemma")
    prompt = Prompt(ours.config, [IMAGE, [2, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12]])
    kwargs = {"prompt_lookup_num_tokens": 3} if assistant == "prompt_lookup" else {"assistant_model": ours}
    with PrefillCounter(ours) as forwards:
        ids, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=6, **kwargs, **NO_SPECIAL_TOKENS)
    assert max(forwards.lengths) > prompt.length  # a forward over the whole prompt held drafts after it
    assert_steps_match_upstream(upstream, prompt, ids[0, prompt.length :], logits)
    expected_ids, _ = generate_logits(upstream, prompt.inputs(), max_new_tokens=6, **NO_SPECIAL_TOKENS)
    assert torch.equal(ids, expected_ids)


# -- 3. Compiled decoding with a static cache -----------------------------------------------------------------------


# Upstream hooks only these tests patch (vlmprep's code neither overrides nor calls them, so `import vlmprep` does not
# check them): method -> the parameters the stand-ins below accept.
TEST_PATCHED_GENERATION_HOOKS = {
    "_valid_auto_compile_criteria": ("model_kwargs", "generation_config"),
    "get_compiled_call": ("compile_config",),
}


@pytest.mark.parametrize("hook", sorted(TEST_PATCHED_GENERATION_HOOKS))
def test_upstream_still_has_the_hooks_these_tests_patch(hook):
    method = getattr(GenerationMixin, hook, None) or getattr(transformers.PreTrainedModel, hook, None)
    assert method_problems(f"GenerationMixin.{hook}", method, TEST_PATCHED_GENERATION_HOOKS[hook]) == []


class _RecordingCompiledCall:
    """Stands in for `get_compiled_call`: records what the compiled forward would receive, without compiling."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __call__(self, compile_config=None):
        def forward(**kwargs):
            self.calls.append((tuple(sorted(kwargs)), kwargs["input_ids"].shape[-1]))
            return self.model(**kwargs)

        return forward


@pytest.mark.parametrize("family", families_with(sampled("mainstream"), not_(has_multimodal_rope)))
def test_compiled_forward_sees_decoding_steps_only_with_one_signature(family, monkeypatch):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    recorded = {}
    for name, model in (("upstream", upstream), ("ours", ours)):
        recorder = _RecordingCompiledCall(model)
        monkeypatch.setattr(model, "get_compiled_call", recorder)
        monkeypatch.setattr(model, "_valid_auto_compile_criteria", lambda *args, **kwargs: True)
        generate_logits(model, prompt.inputs(), max_new_tokens=4, cache_implementation="static")
        recorded[name] = recorder.calls
    assert recorded["ours"] == recorded["upstream"]
    assert all(length == 1 for _, length in recorded["ours"])  # prefill runs eagerly, as upstream runs it
    assert len({keys for keys, _ in recorded["ours"]}) == 1


@pytest.mark.slow
def test_fullgraph_compiled_decoding_never_recompiles():
    upstream, ours = model_pair("llava")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    ours.generation_config.compile_config = CompileConfig(fullgraph=True, dynamic=False)
    ours.generation_config.compile_config._compile_all_devices = True
    torch._dynamo.reset()
    try:
        with torch._dynamo.config.patch(error_on_recompile=True):
            ids, _ = generate_logits(ours, prompt.inputs(), max_new_tokens=5, cache_implementation="static")
    finally:
        ours.generation_config.compile_config = None
    expected_ids, _ = generate_logits(upstream, prompt.inputs(), max_new_tokens=5)
    assert torch.equal(ids, expected_ids)


# -- 4. PaliGemma continued from a cache that holds the image, pixels and token types dropped -----------------------


def _continue_from_cache(model, inputs: dict, drop: tuple[str, ...]):
    # transformers' test_generate_continue_from_past_key_values: generate, then continue with the sequences, the
    # extended mask and the returned cache, without the inputs the cache already covers.
    first = model.generate(**inputs, max_new_tokens=3, do_sample=False, return_dict_in_generate=True)
    sequences = first.sequences
    follow_up = {key: value for key, value in inputs.items() if key not in drop}
    follow_up["input_ids"] = sequences
    follow_up["attention_mask"] = torch.ones_like(sequences)
    return generate_logits(model, follow_up, max_new_tokens=2, cache=first.cache)


def test_paligemma_continues_from_a_cache_holding_the_image():
    upstream, ours = model_pair("paligemma")
    prompt = Prompt(ours.config, [IMAGE, SYSTEM])
    drop = ("pixel_values", "token_type_ids")
    expected_ids, expected = _continue_from_cache(upstream, prompt.inputs(), drop)
    with VisionRunCounter(ours) as runs:
        ids, logits = _continue_from_cache(ours, prompt.inputs(), drop)
    assert runs.calls == 1  # the first call only
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)


# -- 5. Qwen-VL continued with `mm_token_type_ids` shorter than `input_ids` -----------------------------------------


@pytest.mark.parametrize("family", families_with(sampled("rope_continuation")))
def test_qwen_continuation_with_token_types_of_the_prompt_only(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    inputs = prompt.inputs()
    # Pixels dropped (upstream fails on cached images it is given again); the grids stay: vlmprep's positions come
    # from them, never from `rope_deltas` left on the model by the first call.
    expected_ids, expected = _continue_from_cache(upstream, inputs, drop=("pixel_values",))
    with VisionRunCounter(ours) as runs:
        ids, logits = _continue_from_cache(ours, inputs, drop=("pixel_values",))
    assert runs.calls == 1
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)
    ids, logits = _continue_from_cache(ours, inputs, drop=())  # pixels re-sent: the cached image is skipped
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)


def test_qwen_continuation_without_grids_is_refused_clearly():
    # Upstream reads `rope_deltas` left on the model by the previous call; vlmprep keeps no request state, so the
    # grids of the cached images must come with the prompt.
    _, ours = model_pair("qwen2_vl")
    inputs = Prompt(ours.config, [SYSTEM, IMAGE, USER]).inputs()
    with pytest.raises(ValueError, match="image_grid_thw"):
        _continue_from_cache(ours, inputs, drop=("pixel_values", "image_grid_thw"))


def test_token_types_longer_than_the_prompt_are_still_refused():
    _, ours = model_pair("qwen2_vl")
    inputs = Prompt(ours.config, [SYSTEM, IMAGE, USER]).inputs()
    inputs["mm_token_type_ids"] = torch.nn.functional.pad(inputs["mm_token_type_ids"], (0, 2))
    with pytest.raises(ValueError, match="mm_token_type_ids"):
        ours.generate(**inputs, max_new_tokens=1)


# -- 6. `rope_deltas` after generate --------------------------------------------------------------------------------


@pytest.mark.parametrize("segments", [[SYSTEM, IMAGE, USER], [SYSTEM, USER]], ids=["image", "text"])
def test_rope_deltas_written_as_upstream_writes_them(segments):
    upstream, ours = model_pair("qwen2_vl")
    prompt = Prompt(ours.config, segments)
    generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    ours.model.rope_deltas = torch.full_like(upstream.model.rope_deltas, 1000)  # stale: must never be read
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2)
    assert torch.equal(ours.model.rope_deltas, upstream.model.rope_deltas)
    _, expected = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    assert_same_steps(logits, expected)


# -- Without a cache every step recomputes the prompt: still one vision run ------------------------------------------


@pytest.mark.parametrize("family", families_with(sampled("mainstream")))
def test_use_cache_false_encodes_each_image_once(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, IMAGE])
    expected_ids, expected = generate_logits(upstream, prompt.inputs(), max_new_tokens=3, use_cache=False)
    ours.encoder_cache.clear()
    with VisionRunCounter(ours) as runs:
        ids, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=3, use_cache=False)
    assert runs.calls == 1 and runs.images == 2
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)


def test_precomputed_encoder_outputs_are_accepted_as_upstream_accepts_them():
    upstream, ours = model_pair("llava")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, IMAGE])
    inputs = prompt.inputs()
    with torch.no_grad():
        encoded = {"image": upstream.model.get_image_features(inputs.pop("pixel_values"), return_dict=True)}
    expected_ids, expected = generate_logits(upstream, {**inputs, "mm_encoder_outputs": encoded}, max_new_tokens=2)
    with VisionRunCounter(ours) as runs:
        ids, logits = generate_logits(ours, {**inputs, "mm_encoder_outputs": encoded}, max_new_tokens=2)
    assert runs.calls == 0
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)
    with pytest.raises(ValueError, match="Pass one of"):
        ours.generate(**prompt.inputs(), mm_encoder_outputs=encoded, max_new_tokens=1)
