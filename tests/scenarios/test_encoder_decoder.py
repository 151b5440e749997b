"""Encoder-decoder families (Florence-2, T5Gemma 2): images in the encoder's prompt, encoded once per distinct image.

Upstream runs the vision tower again for every prompt on the same image (Florence-2's task prompts `<CAPTION>`, `<OD>`,
`<OCR>`, ...). The drop-in encodes each distinct image once, keeps its features in the encoder cache, and a new prompt
on it runs only the text side of the encoder. Every call is checked against the plain transformers class holding the
same weights: its `generate` (same sequences and logits) and its uncached forward of the prompt and the answer so far
(each step). The decoder-only scenarios these families cannot run are skipped in their cases
(`support/families/cases_encoder_decoder.py`), with the reason.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator

import pytest
import torch
import transformers
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import vlmprep
from conftest import model_pair
from support.generation_checks import GENERATION_MODES, assert_generate_matches_upstream
from support.references import (
    Prompt,
    assert_close,
    assert_same_steps,
    assert_steps_match_upstream,
    collate,
    continued,
    decoder_start_id,
    greedy_output,
)
from support.traits import families_with, is_encoder_decoder
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, TINY_VOCAB_SIZE, random_pixels, tiny_model
from vlmprep.testing.configs import tiny_t5gemma2_config

ENCODER_DECODER = families_with(is_encoder_decoder)
# Caption-, detection- and OCR-like task prompts: different text on the same image
TASKS = ([40, 41], [50, 51, 52, 53], [60])
# Other pixels change upstream's logits by more than this (7e-3 the least of these families' tiny models)
MIN_EFFECT = 1e-3
# Answers of text ids only, without EOS (the tiny decoders would often end at once) or placeholders
ANSWER_TEXT = {"suppress_tokens": [0, 1, 2, *range(100, TINY_VOCAB_SIZE)]}


@contextlib.contextmanager
def tower_runs(model) -> Iterator[list[int]]:
    """The images each forward of the model's vision tower took, counted by a forward hook on the tower."""
    tower = next(module for name, module in model.named_modules() if name.endswith("vision_tower"))
    runs: list[int] = []

    def count(module, args, kwargs, output):
        pixels = args[0] if args else kwargs["pixel_values"]
        runs.append(int(pixels.shape[0]))

    handle = tower.register_forward_hook(count, with_kwargs=True)
    try:
        yield runs
    finally:
        handle.remove()


def check_call(upstream, ours, prompt: Prompt, max_new_tokens: int = 3, **kwargs) -> None:
    """The drop-in's greedy `generate` equals upstream's, and each step upstream's uncached forward."""
    actual = greedy_output(ours, prompt.inputs(), max_new_tokens, **ANSWER_TEXT, **kwargs)
    expected = greedy_output(upstream, prompt.inputs(), max_new_tokens, **ANSWER_TEXT, **kwargs)
    assert torch.equal(actual.sequences, expected.sequences)
    assert_same_steps(actual.logits, expected.logits)
    assert_steps_match_upstream(upstream, prompt, actual.sequences[0, prompt.answer_start :], actual.logits)


@pytest.mark.parametrize("family", ENCODER_DECODER)
def test_task_prompts_on_one_image_encode_it_once(family):
    upstream, ours = model_pair(family)
    with tower_runs(ours) as runs, tower_runs(upstream) as upstream_runs:
        for task in TASKS:
            check_call(upstream, ours, Prompt(ours.config, [IMAGE, task], image_seeds=[3]))
    assert runs == [1], "one tower run for the image, the other task prompts run only the text encoder"
    assert len(upstream_runs) == 2 * len(TASKS), "transformers encodes the image again for every prompt"


@pytest.mark.parametrize("family", ENCODER_DECODER)
def test_other_images_change_the_logits_and_the_drop_in_is_exact(family):
    upstream, ours = model_pair(family)
    prompts = [Prompt(ours.config, [IMAGE, TASKS[0]], image_seeds=[seed]) for seed in (0, 28)]
    with torch.no_grad():
        logits = [upstream(**continued(prompt, [30, 31]), use_cache=False).logits[0, -1] for prompt in prompts]
    effect = (logits[0] - logits[1]).abs().max().item()
    assert effect > MIN_EFFECT, f"other pixels change transformers' logits by only {effect:.1e}"
    for prompt in prompts:  # the second right after the first: no reuse of the first one's features
        check_call(upstream, ours, prompt)


@pytest.mark.parametrize("mode", list(GENERATION_MODES))
@pytest.mark.parametrize("family", ENCODER_DECODER)
def test_generation_modes_match_transformers_with_one_tower_run(family, mode):
    """Beams and several samples share the image's features: one tower run, upstream's sequences and logits."""
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [IMAGE, TASKS[1]], image_seeds=[5])
    with tower_runs(ours) as runs:
        assert_generate_matches_upstream(upstream, ours, prompt.inputs(), mode, max_new_tokens=3)
    assert runs == [1]


@pytest.mark.parametrize("family", ENCODER_DECODER)
def test_left_padded_batch_matches_transformers(family):
    """A left-padded batch of two prompts (two images, one tower run) gives upstream's answers to that batch."""
    upstream, ours = model_pair(family)
    prompts = [Prompt(ours.config, [IMAGE, task], image_seeds=[seed]) for task, seed in ((TASKS[1], 6), (TASKS[2], 7))]
    inputs = collate(prompts, ours.generation_config.pad_token_id)
    with tower_runs(ours) as runs:
        actual = greedy_output(ours, inputs, 3, **ANSWER_TEXT)
    expected = greedy_output(upstream, inputs, 3, **ANSWER_TEXT)
    assert runs == [2]
    assert torch.equal(actual.sequences, expected.sequences)
    assert_same_steps(actual.logits, expected.logits)


@pytest.mark.parametrize("family", ENCODER_DECODER)
def test_chunked_decoder_prompt_is_exact(family):
    """`prefill_chunk_size` cuts the decoder's prompt (the encoder's is encoded whole): each step equals upstream's
    uncached forward. (Upstream's own chunked prefill refuses the pixels it left in T5Gemma 2's kwargs.)"""
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [IMAGE, TASKS[0]], image_seeds=[8])
    start = continued(prompt, [])["decoder_input_ids"][0, 0].item()
    decoder_prompt = torch.tensor([[start, 30, 31, 32, 33]])
    actual = greedy_output(
        ours, prompt.inputs(), 2, decoder_input_ids=decoder_prompt, prefill_chunk_size=2, **ANSWER_TEXT
    )
    answer = actual.sequences[0, 1:].tolist()  # the decoder's prompt after its start token, then the answer
    with torch.no_grad():
        expected = upstream(**continued(prompt, answer[:-1]), use_cache=False).logits[0, -2:]
    for step, step_logits in enumerate(actual.logits):
        assert_close(step_logits[0], expected[step])


@pytest.mark.parametrize("family", ENCODER_DECODER)
def test_chunked_prefill_of_a_padded_batch_keeps_the_encoders_mask(family):
    """Upstream's chunked prefill cuts `attention_mask` to the decoder's chunk, but an encoder-decoder's is the
    encoder's: the padded row's answer moves (Florence-2) or the shapes clash (T5Gemma 2). The drop-in chunks the
    decoder's prompt only: every step equals upstream's unchunked `generate`."""
    upstream, ours = model_pair(family)
    prompts = [
        Prompt(ours.config, [IMAGE, TASKS[2]], image_seeds=[9]),
        Prompt(ours.config, [TASKS[1]], image_seeds=[]),
    ]
    inputs = collate(prompts, ours.generation_config.pad_token_id)
    start = decoder_start_id(ours.config)
    decoder_prompt = {"decoder_input_ids": torch.tensor([[start, 30, 31]] * 2)}
    expected = greedy_output(upstream, inputs, 2, **decoder_prompt, **ANSWER_TEXT)
    for chunk_size in (1, 2):
        actual = greedy_output(ours, inputs, 2, **decoder_prompt, prefill_chunk_size=chunk_size, **ANSWER_TEXT)
        assert torch.equal(actual.sequences, expected.sequences)
        assert_same_steps(actual.logits, expected.logits)


@pytest.mark.parametrize("family", ENCODER_DECODER)
def test_continuing_a_returned_cache_without_pixels_matches_transformers(family):
    # transformers' own `test_generate_continue_from_past_key_values`: the second call passes the first's cache and
    # sequences, and no pixels. The decoder reads the cached cross-attention states (the images'), so upstream answers
    # from the images though its encoder step runs the placeholders as text; the drop-in must run, not refuse them.
    upstream, ours = model_pair(family)
    inputs = Prompt(ours.config, [IMAGE, TASKS[1]], image_seeds=[2]).inputs()
    whole = greedy_output(upstream, inputs, 4, **ANSWER_TEXT)
    outputs = {}
    for name, model in (("upstream", upstream), ("ours", ours)):
        first = greedy_output(model, inputs, 3, **ANSWER_TEXT)
        text_only = {key: value for key, value in inputs.items() if key != "pixel_values"}
        outputs[name] = greedy_output(
            model, text_only, 1, decoder_input_ids=first.sequences, cache=first.cache, **ANSWER_TEXT
        )
    assert torch.equal(outputs["ours"].sequences, outputs["upstream"].sequences)
    assert torch.equal(outputs["ours"].sequences, whole.sequences)
    assert_same_steps(outputs["ours"].logits, outputs["upstream"].logits)


@pytest.mark.parametrize("family", ENCODER_DECODER)
@pytest.mark.parametrize("assistant", ["drop_in_assistant", "upstream_assistant"])
def test_assisted_decoding_matches_transformers_greedy(family, assistant):
    # transformers' own `test_assisted_decoding_matches_greedy_search`: its candidate generator hands the assistant a
    # copy of the main model's kwargs after the encoder step, without `encoder_outputs`, and the assistant encodes the
    # prompt itself: the main model must leave it the pixels (a drop-in assistant refused the placeholders without).
    upstream, ours = model_pair(family)
    inputs = Prompt(ours.config, [IMAGE, TASKS[1]], image_seeds=[4]).inputs()
    expected = greedy_output(upstream, inputs, 4, **ANSWER_TEXT)
    helper = ours if assistant == "drop_in_assistant" else upstream
    with tower_runs(ours) as runs:
        actual = greedy_output(ours, inputs, 4, assistant_model=helper, **ANSWER_TEXT)
    assert torch.equal(actual.sequences, expected.sequences)
    assert_same_steps(actual.logits, expected.logits)
    assert runs == [1], "the drop-in assistant takes the image from the encoder cache"


def test_t5gemma2_token_count_comes_from_the_projector():
    # transformers' own T5Gemma 2 tester: `mm_tokens_per_image=2`, not a square, which the projector pools to
    # int(sqrt(2))**2 = 1 token per image; its prompts hold one placeholder per image.
    config = tiny_t5gemma2_config(mm_tokens_per_image=2)
    upstream = tiny_model(transformers.T5Gemma2ForConditionalGeneration, config, seed=0).eval()
    ours = vlmprep.T5Gemma2ForConditionalGeneration(config).eval()
    ours.load_state_dict(upstream.state_dict())
    assert ours.item_token_counts({}) == 1
    ids = torch.tensor([[config.image_token_id, 40, 41, 42], [config.image_token_id, 50, 51, 52]])
    first_logits = []
    for image_seed in (0, 1):
        pixels = torch.cat([random_pixels(1, image_seed), random_pixels(1, image_seed + 2)])
        inputs = {"input_ids": ids, "pixel_values": pixels}
        actual = greedy_output(ours, inputs, 3, **ANSWER_TEXT)
        expected = greedy_output(upstream, inputs, 3, **ANSWER_TEXT)
        assert torch.equal(actual.sequences, expected.sequences)
        assert_same_steps(actual.logits, expected.logits)
        first_logits.append(actual.logits[0])
    assert (first_logits[0] - first_logits[1]).abs().max() > MIN_EFFECT, "other pixels must change the logits"


@pytest.mark.parametrize("family", ENCODER_DECODER)
def test_prefix_cache_is_refused_saying_why(family):
    _, ours = model_pair(family)
    prompt = Prompt(ours.config, [IMAGE, TASKS[0]], image_seeds=[0])
    with pytest.raises(ValueError, match="encoder-decoder: its decoder cross-attends to the whole encoder output"):
        ours.generate(**prompt.inputs(), max_new_tokens=1, prefix_cache=PrefixCache())


@pytest.mark.parametrize("family", ENCODER_DECODER)
def test_continuous_batching_is_refused_saying_why(family):
    _, ours = model_pair(family)
    prompt = Prompt(ours.config, [IMAGE, TASKS[0]], image_seeds=[0])
    with pytest.raises(ValueError, match="is an encoder-decoder: transformers' continuous-batching engine"):
        ours.generate_batch([prompt.inputs()], max_new_tokens=1, progress_bar=False)


# -- Differential: random calls, each checked against transformers -----------------------------------------------------

IMAGE_SEEDS = (11, 12, 13)  # a small pool: later calls meet images an earlier call encoded


@st.composite
def calls(draw) -> list[dict]:
    """A few calls: each a batch of 1-2 prompts (an image from the pool, or none: a text-only prompt) with a task of
    1-5 text ids, in a generation mode."""
    drawn = []
    for _ in range(draw(st.integers(1, 3))):
        rows = [
            (draw(st.sampled_from((*IMAGE_SEEDS, None))), draw(st.lists(st.integers(3, 99), min_size=1, max_size=5)))
            for _ in range(draw(st.integers(1, 2)))
        ]
        drawn.append({"rows": rows, "mode": draw(st.sampled_from(sorted(GENERATION_MODES)))})
    return drawn


def run_call(family: str, call: dict, seen: set[int]) -> None:
    upstream, ours = model_pair(family)
    rows = call["rows"]
    prompts = [
        Prompt(ours.config, [IMAGE, task], image_seeds=[image_seed])
        if image_seed is not None
        else Prompt(ours.config, [task], image_seeds=[])
        for image_seed, task in rows
    ]
    inputs = prompts[0].inputs() if len(prompts) == 1 else collate(prompts, ours.generation_config.pad_token_id)
    new_images = {image_seed for image_seed, _ in rows if image_seed is not None} - seen
    with tower_runs(ours) as runs:
        assert_generate_matches_upstream(upstream, ours, inputs, call["mode"], max_new_tokens=2)
    assert sum(runs) == len(new_images), "each image not seen before encoded once, the others from the cache"
    seen |= new_images


@pytest.mark.parametrize("family", ENCODER_DECODER)
def test_random_calls_match_transformers(family):
    seen: set[int] = set()

    @seed(zlib.crc32(family.encode()))
    @settings(max_examples=6, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(calls())
    def check(drawn: list[dict]) -> None:
        for call in drawn:
            run_call(family, call, seen)

    check()
