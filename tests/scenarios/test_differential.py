"""Differential test: random conversations through the drop-in, every call checked against plain transformers.

Hypothesis draws conversations (`support.differential_strategies.conversations`): batches of prompts with 0-3 items
(adjacent or with text between): images, and for a family whose case builds them audio clips mixed with images
(`test_differential_with_audio`) and videos, alone or mixed with images and clips (`test_differential_with_videos`;
no images where the family's prompts hold one or the other, `FamilyCase.videos_apart_from_images`); left padding,
chunk sizes, cache salts, the prefix store on or off, a caller's cache filled by transformers over a prefix,
continuations of the answers (with or without the returned cache), hidden states and attentions returned, assisted
decoding (prompt lookup, the drop-in or transformers as assistant), and weight changes between calls. Each
`generate` of the drop-in is compared with the transformers class holding the same weights: the first step with one
uncached forward of the whole prompt, every step with transformers' own greedy `generate` (no cache passed, no
chunking), or, for a family whose upstream `generate` numbers decoded tokens unlike its own forward
(`FamilyCase.upstream_decode_positions_differ`), with one uncached forward of the prompt and the answer so far.
vlmprep's own output is never a reference.

The models are private copies of the session pair (weight changes never leak into other tests); each family's
`PrefixCache` is kept across examples, so later examples meet entries stored by earlier ones (and under earlier
weights). CI runs a fixed count of examples per family (`VLMPREP_DIFFERENTIAL_EXAMPLES` overrides it), drawn from a
seed of the family's name, so every run checks the same conversations; the `slow` tests run many more, with images
and with videos (`make test-slow`).
"""

from __future__ import annotations

import contextlib
import copy
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, seed, settings
from transformers import DynamicCache

import vlmprep
from conftest import model_pair
from support.caller_caches import cropped_cache
from support.differential_strategies import (
    STORE_HIT_CONVERSATION,
    CallOptions,
    Conversation,
    Row,
    conversations,
    store_hit_conversation,
    within_refusals,
)
from support.references import (
    ATOL,
    Prompt,
    assert_close,
    collate,
    continued,
    eager_attention,
    greedy_output,
    uncached_logits,
)
from support.registry import FAMILY_CASES, scenario
from support.traits import encodes_with_batch_norm
from vlmprep.testing import AUDIO, IMAGE, VIDEO

CI_EXAMPLES = int(os.environ.get("VLMPREP_DIFFERENTIAL_EXAMPLES", "5"))
SLOW_EXAMPLES = 60
# Row-wise, a left-padded batch sums in another order than the row alone: float32 noise, not a difference.
PADDED_ROW_ATOL = 1e-4

# No deadline (a call takes 0.05-2 s) and no example database: every run draws the same examples from the seed.
COMMON_SETTINGS = {
    "deadline": None,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@dataclass
class FamilyState:
    """A private copy of a family's (transformers, drop-in) pair, its prefix store and the weights before changes."""

    upstream: torch.nn.Module
    ours: torch.nn.Module
    store: vlmprep.PrefixCache
    parameter_names: list[str]
    originals: dict[str, torch.Tensor] = field(default_factory=dict)


_STATES: dict[str, FamilyState] = {}


def family_state(family: str) -> FamilyState:
    if family not in _STATES:
        upstream, ours = (copy.deepcopy(model) for model in model_pair(family))
        names = sorted(name for name, _ in upstream.named_parameters())
        assert names == sorted(name for name, _ in ours.named_parameters()), "the drop-in renames parameters"
        _STATES[family] = FamilyState(upstream, ours, vlmprep.PrefixCache(block_size=4), names)
    return _STATES[family]


def change_weight(state: FamilyState, index: int, factor: float) -> None:
    """Set one parameter to `factor` times its original value on both models (1.0 restores it)."""
    name = state.parameter_names[index % len(state.parameter_names)]
    upstream_parameter = state.upstream.get_parameter(name)
    original = state.originals.setdefault(name, upstream_parameter.detach().clone())
    with torch.no_grad():
        for parameter in (upstream_parameter, state.ours.get_parameter(name)):
            parameter.copy_(original * factor)


def suppressed_tokens(model) -> list[int]:
    """Every id outside the text range 3..99: answers never hold specials (eos, placeholders), so every row generates
    `max_new_tokens` tokens and continuations are plain text. Raw logits (`output_logits`) are not affected."""
    return [token for token in range(model.config.get_text_config().vocab_size) if not 3 <= token <= 99]


def build_inputs(ours, rows: list[Row]) -> tuple[dict, list[Prompt]]:
    prompts = [Prompt(ours.config, list(row.segments), image_seeds=list(row.image_seeds)) for row in rows]
    if len(prompts) == 1:
        return prompts[0].inputs(), prompts
    return collate(prompts, ours.generation_config.pad_token_id), prompts


def greedy(model, inputs: dict, max_new_tokens: int, **kwargs):
    return greedy_output(model, inputs, max_new_tokens, suppress_tokens=suppressed_tokens(model), **kwargs)


def callers_cache(upstream, inputs: dict, fraction: float) -> DynamicCache:
    """A cache the caller filled with transformers over the first tokens of the prompt (at least one, not all).

    transformers' own prefill fills it (`cropped_cache`), so a left-padded row gets the positions `generate` gives
    it; a bare forward would number the padding.
    """
    width = inputs["input_ids"].shape[1]
    return cropped_cache(upstream, inputs, 1 + int(fraction * (width - 2)))


@contextlib.contextmanager
def part_in_train_mode(models: tuple[torch.nn.Module, ...], part: str | None) -> Iterator[None]:
    """One part of each model in train mode (its decoder, or everything of `model.model` besides it), the top module
    in eval mode. The tiny configs have no dropout, so the logits stay comparable with transformers'."""
    trained = []
    for model in models if part is not None else ():
        decoder = model.get_decoder()
        inner = getattr(model, "model", model)
        trained += [decoder] if part == "decoder" else [child for child in inner.children() if child is not decoder]
    try:
        for module in trained:
            module.train()
        yield
    finally:
        for module in trained:
            module.eval()


def check_call(state: FamilyState, inputs: dict, prompts: list[Prompt], options: CallOptions, returned_cache):
    """One drop-in `generate`, checked against transformers; returns its output."""
    upstream, ours = state.upstream, state.ours
    recurrent = "linear_attention" in (getattr(ours.config.get_text_config(), "layer_types", None) or ())
    if recurrent:
        # A recurrent state (Gated DeltaNet, Mamba) only moves forward: `DynamicCache.crop` (how `callers_cache` is
        # built) cannot roll it back
        options = replace(options, cached_fraction=None)
    kwargs = {}
    if options.chunk_size is not None:
        kwargs["prefill_chunk_size"] = options.chunk_size
    if options.salt is not None:
        kwargs["cache_salt"] = options.salt
    if options.use_prefix_store:
        kwargs["prefix_cache"] = state.store
    if returned_cache is not None:
        kwargs["cache"] = returned_cache
    elif options.cached_fraction is not None and inputs["input_ids"].shape[1] > 1:  # a cache must leave a token
        kwargs["cache"] = callers_cache(upstream, inputs, options.cached_fraction)
    outputs = {"output_hidden_states": options.output_hidden_states, "output_attentions": options.output_attentions}
    assisted = {}
    if options.assistant == "prompt_lookup":
        assisted["prompt_lookup_num_tokens"] = 3
    elif options.assistant is not None:
        assisted["assistant_model"] = ours if options.assistant == "drop_in_assistant" else upstream
    if assisted and recurrent:
        # A rejected draft cannot be rolled back out of a recurrent state exactly: the drop-in refuses assisted
        # decoding on every transformers version (5.24 refused it, 5.25 runs it and drifts from greedy decoding), and
        # the call runs without an assistant.
        with pytest.raises(ValueError, match="recurrent state"):
            ours.generate(**inputs, max_new_tokens=1, **assisted)
        assisted = {}
    elif assisted and "cache" in kwargs and (options.output_hidden_states or options.output_attentions):
        # The first assisted forward runs the tokens after the cache only; transformers splits its hidden states and
        # attentions as if it covered the whole prompt (5.25 fails, 5.24 misplaces them): refused on every version,
        # and the call runs without an assistant, from a fresh cache (the refused call left it recording).
        with pytest.raises(ValueError, match="cannot return hidden states or attentions"):
            greedy(ours, inputs, 1, **outputs, **kwargs, **assisted)
        assisted = {}
        if returned_cache is None:
            kwargs["cache"] = callers_cache(upstream, inputs, options.cached_fraction)
    kwargs.update(assisted)
    options = options if assisted else replace(options, assistant=None)

    def call_attention():
        # Every reference runs under the call's attention implementation: SDPA and eager round differently, which a
        # sparse top-k (GLM-5-Next's indexer) turns into another selection of keys
        return eager_attention(upstream, ours) if options.output_attentions else contextlib.nullcontext()

    with call_attention(), part_in_train_mode((ours, upstream), options.train_part):
        lookups = state.store.stats.lookups
        actual = greedy(ours, inputs, options.max_new_tokens, **outputs, **kwargs)
        expected = greedy(upstream, inputs, options.max_new_tokens, **outputs)
    if options.train_part is not None:  # dropout would make stored or served KV depend on one call's draw
        assert state.store.stats.lookups == lookups
    decode_positions_differ = FAMILY_CASES[ours.config.model_type].upstream_decode_positions_differ
    if decode_positions_differ:
        with call_attention():
            check_steps_against_forwards(upstream, prompts, actual)
    else:
        assert torch.equal(actual.sequences, expected.sequences), (actual.sequences, expected.sequences)
        for step_actual, step_expected in zip(actual.logits, expected.logits, strict=True):
            assert_close(step_actual, step_expected)
    # Hidden states and attentions of a call that prefills the whole prompt in one forward and decodes one token a
    # step are transformers' own (a caller's cache, chunks and drafts change which tokens a forward covers upstream too)
    if "cache" not in kwargs and options.chunk_size is None and options.assistant is None:
        for name, per_step in returned_states(ours.config):
            steps = 1 if decode_positions_differ else None  # later steps follow other positions upstream
            returned = [getattr(output, name) or () for output in (actual, expected)]
            if not per_step:  # an encoder's: one tuple of layers for the call
                returned = [(layers,) if layers else () for layers in returned]
            for step_actual, step_expected in zip(returned[0][:steps], returned[1][:steps], strict=True):
                for layer_actual, layer_expected in zip(step_actual, step_expected, strict=True):
                    assert layer_actual.shape == layer_expected.shape, name
                    assert_close(layer_actual, layer_expected, atol=PADDED_ROW_ATOL if len(prompts) > 1 else ATOL)
    case = FAMILY_CASES[ours.config.model_type]
    with torch.no_grad(), call_attention():
        if len(prompts) > 1 and case.padded_rows_follow_pad_states:
            pass  # checked against upstream's `generate` above: its forward of the padded batch numbers it otherwise
        elif len(prompts) == 1 or case.padding_moves_upstream:
            atol = ATOL if len(prompts) == 1 else PADDED_ROW_ATOL
            assert_close(actual.logits[0], uncached_logits(upstream, inputs), atol=atol)
        else:  # each row alone, unpadded: one uncached forward of its whole prompt
            for row, prompt in enumerate(prompts):
                solo = uncached_logits(upstream, prompt.inputs())
                assert_close(actual.logits[0][row : row + 1], solo, atol=PADDED_ROW_ATOL)
    return actual


def returned_states(config) -> list[tuple[str, bool]]:
    """The hidden states and attentions a `generate` output holds, and whether each is per step: a decoder-only
    model's `hidden_states` and `attentions`; an encoder-decoder's encoder ones (one tuple of layers for the call) and
    its decoder's and cross-attentions (per step)."""
    if not config.is_encoder_decoder:
        return [("hidden_states", True), ("attentions", True)]
    encoder = [("encoder_hidden_states", False), ("encoder_attentions", False)]
    return [*encoder, ("decoder_hidden_states", True), ("decoder_attentions", True), ("cross_attentions", True)]


def check_steps_against_forwards(upstream, prompts: list[Prompt], actual) -> None:
    """Every step of each row against one uncached forward of that row's prompt (alone) and its answer so far."""
    width = actual.sequences.shape[1] - len(actual.logits)
    atol = PADDED_ROW_ATOL if len(prompts) > 1 else ATOL
    for row, prompt in enumerate(prompts):
        answer = actual.sequences[row, width:-1].tolist()  # the last token is fed to no step
        with torch.no_grad():
            expected = upstream(**continued(prompt, answer), use_cache=False).logits[0, prompt.length - 1 :]
        for step, step_logits in enumerate(actual.logits):
            assert_close(step_logits[row], expected[step], atol=atol)


def run_conversation(family: str, conversation: Conversation) -> None:
    state = family_state(family)
    rows = list(conversation.rows)
    inputs, prompts = build_inputs(state.ours, rows)
    calls = [(None, conversation.first), *conversation.continuations]
    output = None
    for extension, options in calls:
        returned_cache = None
        if extension is not None:
            # A decoder-only model's sequences continue the prompt; an encoder-decoder's are its decoder's, from the
            # start token (the answer goes on in the encoder's next prompt)
            width = 1 if state.ours.config.is_encoder_decoder else inputs["input_ids"].shape[1]
            answers = output.sequences[:, width:].tolist()
            rows = [
                Row((*row.segments, answer, *extension.segments), (*row.image_seeds, *extension.image_seeds))
                for row, answer in zip(rows, answers, strict=True)
            ]
            if options.reuse_returned_cache:
                returned_cache = output.cache
            inputs, prompts = build_inputs(state.ours, rows)
        # The caller's own cache holds KV of the old weights: changing weights under it is the caller's doing.
        if options.weight_change is not None and returned_cache is None:
            change_weight(state, options.weight_change.index, options.weight_change.factor)
        output = check_call(state, inputs, prompts, options, returned_cache)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models gain nothing from threads; on a shared machine, contended threads make each matmul ~10x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def check_conversations(family: str, max_examples: int, media: tuple = (IMAGE,)) -> None:
    """Run `max_examples` conversations on `family`, drawn from a seed of the family's name.

    Each family gets its own (fixed) examples: a `derandomize`d test draws the same ones for every parameter.
    `media` are the item markers prompts are drawn with (`IMAGE`; `VIDEO`, `AUDIO` too for families with videos or
    audio); with videos, the store-hit example's items are taken in turn from `media` (a video first).
    """

    @example(conversation=store_hit_conversation(media) if VIDEO in media else STORE_HIT_CONVERSATION)
    @seed(zlib.crc32(family.encode()))
    @settings(max_examples=max_examples, **COMMON_SETTINGS)
    @given(conversation=conversations(media=media))
    def check(conversation: Conversation) -> None:
        conversation = within_refusals(conversation, frozenset(FAMILY_CASES[family].differential_refusals))
        calls = [conversation.first, *(options for _, options in conversation.continuations)]
        # Encoders with BatchNorm refuse train mode (the refusal: tests/units/test_batch_norm_encoders.py)
        refused_parts = (
            *FAMILY_CASES[family].refused_train_parts,
            *(("vision",) if encodes_with_batch_norm(family) else ()),
        )
        assume(not any(options.train_part in refused_parts for options in calls))
        if FAMILY_CASES[family].one_row_with_items:  # the refusal itself: tests/units/test_patch_grid_framed.py
            extensions = [row for row, _ in conversation.continuations]  # appended to every row
            has_items = any(row.image_seeds for row in (*conversation.rows, *extensions))
            assume(len(conversation.rows) == 1 or not has_items)
        if FAMILY_CASES[family].upstream_needs_items:  # text-only calls: tests/units/test_blip_2.py
            assume(bool(conversation.rows[0].image_seeds))
            assume(all(options.assistant in (None, "prompt_lookup", "drop_in_assistant") for options in calls))
        if FAMILY_CASES[family].padded_rows_follow_pad_states and len(conversation.rows) > 1:
            refused = [o.cached_fraction is not None or o.reuse_returned_cache for o in calls]
            assume(not any(refused) and not any(o.chunk_size and o.output_attentions for o in calls))
        run_conversation(family, conversation)

    check()


@scenario
def test_differential(family):
    check_conversations(family, CI_EXAMPLES)


# Families whose cases build audio clips: conversations mixing images and clips.
AUDIO_FAMILIES = sorted(family for family, case in FAMILY_CASES.items() if case.builds_audio)


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_differential_with_audio(family):
    check_conversations(family, CI_EXAMPLES, media=(IMAGE, AUDIO))


# Families whose cases build videos: conversations with videos, alone or mixed with images (and audio clips).
VIDEO_FAMILIES = sorted(family for family, case in FAMILY_CASES.items() if case.builds_videos)


def video_media(family: str) -> tuple:
    """The markers a video conversation draws items from, a video first (the store-hit example's first item); no
    images where the family's prompts hold videos or images, never both (image conversations: `test_differential`)."""
    case = FAMILY_CASES[family]
    media = (VIDEO,) if case.videos_apart_from_images else (VIDEO, IMAGE)
    return (*media, AUDIO) if case.builds_audio else media


@pytest.mark.parametrize("family", VIDEO_FAMILIES)
def test_differential_with_videos(family):
    check_conversations(family, CI_EXAMPLES, media=video_media(family))


@pytest.mark.slow
@scenario(name="differential")
def test_differential_long(family):
    check_conversations(family, SLOW_EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("family", VIDEO_FAMILIES)
def test_differential_with_videos_long(family):
    check_conversations(family, SLOW_EXAMPLES, media=video_media(family))
