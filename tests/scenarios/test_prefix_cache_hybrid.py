"""The prefix cache on hybrid decoders (Gated DeltaNet, short convolutions): snapshots of the recurrent states.

A hybrid decoder resumes only where every recurrent layer's state is stored (the end of a stored row, an item's end,
a prefill chunk's end). Every logit is compared with the plain transformers class without a cache; work is counted
where it happens (vision-encoder calls, tokens each language-model forward is fed).
"""

from __future__ import annotations

import gc

import pytest
import torch
import transformers
from transformers import LogitsProcessor

import vlmprep
from conftest import model_pair
from support.chat import run_chat, turn_image_seeds
from support.references import (
    ATOL,
    Prompt,
    assert_close,
    continued,
    generate_logits,
    greedy_output,
    no_placeholder_answers,
    reference_next_logits,
    uncached_logits,
)
from support.traits import (
    families_with,
    has_convolution_state_only,
    has_recurrent_state,
    has_sliding_window_layers,
    has_state_layers,
    is_encoder_decoder,
    loops_decoder_layers,
    not_,
    pins_its_prompt,
    sampled,
)
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, PrefillCounter, VisionRunCounter, tiny_config, tiny_model

SYSTEM = [2, *range(10, 21)]  # 12 tokens
USER_TURNS = [[SYSTEM, IMAGE, [30, 31]], [[32, 33, 34]], [[35], IMAGE, [36, 37]], [[38, 39]], [[40, 41, 42]]]
# Decoders with layers that keep a state besides keys and values (Gated DeltaNet, Mamba-2, KDA, short convolutions)
# (Looped layers, whose passes add cache layers, keep the store off: `test_looped_layers_keep_the_store_off`)
HYBRID_FAMILIES = families_with(has_state_layers, not_(loops_decoder_layers))


# A chat template re-renders earlier answers: Qwen3.5's strips their thinking (here an answer's first 2 tokens become an
# empty thinking block), and an answer re-tokenized from its text may differ near its end (a token replaced). These ids
# are kept out of answers, so each re-sent answer parts from the generated one exactly there.
EMPTY_THINKING = [77, 78]
REPLACED = 79


def _resent_by_a_template(turn: int, answer: list[int]) -> list[int]:
    if turn % 2 == 0:
        return [*EMPTY_THINKING, *answer[2:]]  # parts where the answer starts (the end of the stored prompt)
    return [*answer[:-2], REPLACED, answer[-1]]  # parts at the answer's last fed token


def _first_convolution_weight(model) -> torch.Tensor:
    # The running state's convolution: Gated DeltaNet's and GLM-5-Next's `conv1d`, LFM2's short convolution,
    # Inkling2's short convolutions of keys, values and residual streams
    # Nemotron-H's Mamba-2 mixers' `conv1d` (the decoder's, not the audio tower's)
    return next(module.weight for module in model.get_decoder().modules() if isinstance(module, torch.nn.Conv1d))


@pytest.mark.parametrize("family", families_with(loops_decoder_layers))
def test_looped_layers_keep_the_store_off(family):
    # Each pass of a looped layer adds a cache layer in the forward, which a restored prefix would not have: the store
    # stores nothing (it logs why, once), and every call is still exact
    upstream, ours = model_pair(family)
    store = PrefixCache(max_bytes=2**26)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[3])
    for _ in range(2):
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store)
        assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))
    assert store.stats.hits == 0 and store.stats.entries == 0


@pytest.mark.parametrize("family", HYBRID_FAMILIES)
def test_the_recurrent_layers_reach_the_logits(family):
    # Tiny models must be able to fail: a resume with a wrong or missing state must move the logits
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[3])
    expected = uncached_logits(upstream, prompt.inputs())
    weight = _first_convolution_weight(upstream)
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.zero_()
    try:
        without_convolution = uncached_logits(upstream, prompt.inputs())
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    assert (expected - without_convolution).abs().max() > 10 * ATOL  # well past what the checks below tolerate


@pytest.mark.parametrize("family", HYBRID_FAMILIES)
def test_five_turn_chat_with_two_images_resumes_from_snapshots(family):
    upstream, ours = model_pair(family)
    ours.encoder_cache.clear()
    store = PrefixCache(max_bytes=2**26)
    new_tokens = 4
    seeds = turn_image_seeds(USER_TURNS)
    chat = run_chat(upstream, ours, USER_TURNS, seeds, store, new_tokens, **no_placeholder_answers(ours))
    encoded, fed, minimum, prompt = chat.encoded, chat.fed, chat.minimum, chat.last_prompt
    assert len(encoded) == 2 and sum(encoded) == ours.count_items(prompt.inputs()), "each image is encoded once"
    assert fed <= 1.02 * minimum, (fed, minimum)
    stats = store.stats
    assert stats.hits == len(USER_TURNS) - 1 and stats.snapshots > 0 and 0 < stats.snapshot_bytes < stats.bytes


@pytest.mark.parametrize("family", HYBRID_FAMILIES)
def test_five_turn_chat_whose_answers_are_re_sent_otherwise_feeds_the_minimum(family):
    # Every re-sent answer parts from the stored row inside it (at the generation boundary, or near the answer's end):
    # the store resumes exactly there, from the snapshot at the prompt's end or among the answer's last positions
    upstream, ours = model_pair(family)
    ours.encoder_cache.clear()
    store = PrefixCache(max_bytes=2**26)
    answer = no_placeholder_answers(ours)
    answer["suppress_tokens"] = sorted({*answer["suppress_tokens"], *EMPTY_THINKING, REPLACED})
    seeds = turn_image_seeds(USER_TURNS)
    chat = run_chat(upstream, ours, USER_TURNS, seeds, store, 6, resend=_resent_by_a_template, **answer)
    assert chat.fed <= 1.02 * chat.minimum, (chat.fed, chat.minimum)
    stats = store.stats
    assert stats.hits == len(USER_TURNS) - 1 and stats.tokens_shared == stats.tokens_reused, stats


def test_a_resume_short_of_the_shared_prefix_shows_in_the_stats():
    # No snapshot among the answer's last positions but its end (`snapshot_tail=1`): a turn re-sending the answer with
    # its last fed token replaced resumes at the previous prompt's end, and the stats say how much was shared
    upstream, ours = model_pair("qwen3_5")
    store = PrefixCache(max_bytes=2**26, snapshot_tail=1)
    answer = no_placeholder_answers(ours)
    answer["suppress_tokens"] = sorted({*answer["suppress_tokens"], REPLACED})
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[3])
    sequences, _ = generate_logits(ours, first.inputs(), max_new_tokens=6, prefix_cache=store, **answer)
    generated = sequences[0, first.length :].tolist()
    second = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31], _resent_by_a_template(1, generated), [32]], image_seeds=[3])
    with PrefillCounter(ours) as counter:
        _, logits = generate_logits(ours, second.inputs(), max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], uncached_logits(upstream, second.inputs()))
    stats = store.stats
    shared = first.length + len(generated) - 2  # up to the replaced token
    assert (stats.tokens_shared, stats.tokens_reused) == (shared, first.length), stats
    assert sum(counter.lengths) == second.length - first.length


@pytest.mark.parametrize("family", families_with(sampled("state_snapshots")))
def test_an_answer_edited_in_its_middle_resumes_at_the_last_periodic_snapshot_before_the_edit(family):
    # Snapshots every 4 decoded tokens and at the last 2 positions: an edit at decoded token 6 of 12 resumes at 4
    upstream, ours = model_pair(family)
    store = PrefixCache(max_bytes=2**26, snapshot_tail=2, snapshot_every=4)
    answer = no_placeholder_answers(ours)
    answer["suppress_tokens"] = sorted({*answer["suppress_tokens"], REPLACED})
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[3])
    sequences, _ = generate_logits(ours, first.inputs(), max_new_tokens=12, prefix_cache=store, **answer)
    generated = sequences[0, first.length :].tolist()
    assert len(generated) == 12 and not ours._forward_hooks, "the call's hook leaves with it"
    # Stored: the image's end, the prompt's end, decoded tokens 4 and 8, the last 2 fed positions (10 and 11)
    assert store.stats.snapshots == 6, store.stats
    edited = [*generated[:6], REPLACED, *generated[7:]]
    second = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31], edited, [32]], image_seeds=[3])
    with PrefillCounter(ours) as counter:
        _, logits = generate_logits(ours, second.inputs(), max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], uncached_logits(upstream, second.inputs()))
    assert sum(counter.lengths) == second.length - (first.length + 4), counter.lengths


def test_a_call_that_raises_while_decoding_leaves_no_hook_behind():
    # The call's forward hook (reading the answer's states) is removed when the call stores its rows; a call that
    # raises never does, and its hook must neither keep the call's cache alive nor read a later call's forwards
    upstream, ours = model_pair("qwen3_5")
    store = PrefixCache(max_bytes=2**26)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[3])

    class RaiseAtStep(LogitsProcessor):
        def __call__(self, input_ids, scores):
            if input_ids.shape[1] > prompt.length + 1:
                raise RuntimeError("stopped by the caller")
            return scores

    with pytest.raises(RuntimeError, match="stopped by the caller"):
        generate_logits(ours, prompt.inputs(), max_new_tokens=4, prefix_cache=store, logits_processor=[RaiseAtStep()])
    gc.collect()
    assert len(ours._forward_hooks) == 1 and store.stats.snapshots == 0
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2, prefix_cache=store)
    assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))
    assert not ours._forward_hooks and store.stats.snapshots > 0


@pytest.mark.parametrize("family", HYBRID_FAMILIES)
def test_two_conversations_share_a_system_prompt_with_an_image(family):
    upstream, ours = model_pair(family)
    store = PrefixCache(max_bytes=2**26)
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32]], image_seeds=[7])
    second = Prompt(ours.config, [SYSTEM, IMAGE, [40, 41]], image_seeds=[7])
    generate_logits(ours, first.inputs(), max_new_tokens=2, prefix_cache=store, **no_placeholder_answers(ours))
    with VisionRunCounter(ours) as runs, PrefillCounter(ours) as counter:
        _, logits = generate_logits(ours, second.inputs(), max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], uncached_logits(upstream, second.inputs()))
    assert runs.batch_sizes == [], "the shared image is inside the restored prefix"
    # Resumed right after the image: only the new user text (and what follows the image's end) is fed
    assert sum(counter.lengths) <= 2 + 2, counter.lengths


def test_attention_first_and_a_two_input_convolution_as_transformers_tester_builds_it():
    # transformers' own Qwen3.5 tester puts the attention layer first and uses a convolution of 2 inputs: snapshots
    # follow the cache's layer classes, whatever their order and window
    config = tiny_config("qwen3_5")
    config.text_config.layer_types = ["full_attention", "linear_attention"]
    config.text_config.linear_conv_kernel_dim = 2
    upstream = tiny_model(transformers.Qwen3_5ForConditionalGeneration, config, seed=1)
    ours = vlmprep.Qwen3_5ForConditionalGeneration(config).eval()
    ours.load_state_dict(upstream.state_dict())
    store = PrefixCache()
    segments = [SYSTEM, IMAGE, [30, 31]]
    for turn in range(3):
        prompt = Prompt(config, segments, image_seeds=[5])
        sequences, logits = generate_logits(
            ours, prompt.inputs(), max_new_tokens=3, prefix_cache=store, **no_placeholder_answers(ours)
        )
        assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))
        segments = [*segments, sequences[0, prompt.length :].tolist(), [40 + turn, 41]]
    assert store.stats.hits == 2


def test_qwen4_exps_ngram_embeddings_reach_the_logits_and_resume_exactly():
    # Its per-layer embeddings hash each token with the 2 before it: a resume point (or a chunk) that lost the token ids
    # before it would change them. The ids are a state of the cache layer, snapshotted like a convolution window.
    upstream, ours = model_pair("qwen4_exp")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32, 33]], image_seeds=[3])
    expected = uncached_logits(upstream, prompt.inputs())
    embedding = next(layer.ple for layer in upstream.model.language_model.layers if layer.ple is not None)
    weight = embedding.ple_embedding.ngram_embedding.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.copy_(weight.roll(1, dims=0))  # other n-grams' embeddings
    try:
        assert (expected - uncached_logits(upstream, prompt.inputs())).abs().max() > 1e-3
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    store = PrefixCache(max_bytes=2**26)
    shorter = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[3])
    generate_logits(ours, shorter.inputs(), max_new_tokens=1, prefix_cache=store, **no_placeholder_answers(ours))
    with PrefillCounter(ours) as counter:
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], expected)
    assert sum(counter.lengths) < prompt.length // 2, counter.lengths  # resumed: only the new tokens are fed


@pytest.mark.parametrize("shared", ["text", "image"])
@pytest.mark.parametrize("family", families_with(has_convolution_state_only, not_(loops_decoder_layers)))
def test_a_hit_at_a_chunk_end_resumes_from_the_restored_length(family, shared):
    # transformers >= 5.25's `get_seq_length` reads layer 0's own count, here a convolution's: after a restore it must
    # be the restored prefix's length, not the window's (it said 3: prefill went on from token 3, 0.64 off in logits,
    # or a KeyError with an image in the restored prefix)
    upstream, ours = model_pair(family)
    chunk = 4
    store = PrefixCache(max_bytes=2**26)
    stored = Prompt(ours.config, [SYSTEM, IMAGE, list(range(30, 42))], image_seeds=[3])
    generate_logits(ours, stored.inputs(), max_new_tokens=1, prefix_cache=store, prefill_chunk_size=chunk)
    diverging = [SYSTEM[:10] + [60, 61], IMAGE, [30]] if shared == "text" else [SYSTEM, IMAGE, [*range(30, 38), 60]]
    prompt = Prompt(ours.config, diverging, image_seeds=[3])
    with PrefillCounter(ours) as counter:
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store, prefill_chunk_size=4)
    assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))
    resumed = prompt.length - sum(counter.lengths)
    image_end = int((prompt.input_ids[0] == ours.config.image_token_id).nonzero().max()) + 1
    # A chunk end inside the shared part (the stored row's end lies past where the prompts diverge)
    assert resumed % chunk == 0 and (0 < resumed <= 10 if shared == "text" else resumed > image_end), resumed


@pytest.mark.parametrize("family", families_with(has_recurrent_state))
def test_a_call_keeps_no_past_recurrent_states_while_it_decodes(family):
    # A recording Gated DeltaNet or Mamba-2 layer keeps a copy of its recurrent state per forward (transformers
    # >= 5.25) and every input of its convolution, growing with each decoded token: the store needs neither
    upstream, ours = model_pair(family)
    store = PrefixCache(max_bytes=2**26)
    held = []

    def record_held(module, args, kwargs):
        # Per running-state layer: past recurrent states kept, and inputs held beyond each convolution's window
        cache = kwargs["cache"]
        for layer in (layer for layer in cache.layers if hasattr(layer, "conv_states")):
            history = getattr(layer, "recurrent_states_history", {})
            beyond = [
                inputs.shape[-1] - layer.conv_kernel_size[state]
                for state, inputs in layer.conv_states.items()
                if inputs is not None
            ]
            held.append((sum(len(states) for states in history.values()), max(beyond, default=0)))

    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[3])
    handle = ours.register_forward_pre_hook(record_held, with_kwargs=True)
    try:
        for _ in range(2):  # the second call restores the first one's prompt
            output = greedy_output(ours, prompt.inputs(), max_new_tokens=6, prefix_cache=store)
            assert_close(output.logits[0], uncached_logits(upstream, prompt.inputs()))
    finally:
        handle.remove()
    record_held(None, (), {"cache": output.cache})
    assert store.stats.hits == 1 and held and set(held) == {(0, 0)}, held


# (The store is off where looped layers add cache layers or reference layers pin the prompt, and refused for an
# encoder-decoder)
@pytest.mark.parametrize(
    "family",
    families_with(
        has_sliding_window_layers, not_(loops_decoder_layers), not_(pins_its_prompt), not_(is_encoder_decoder)
    ),
)
def test_the_returned_cache_holds_what_upstreams_holds_and_continues_exactly(family):
    # The call's cache records its sliding-window layers (and Inkling2's convolutions sharing their layer) to store
    # whole rows; the cache handed back must not keep growing with every turn the caller continues with it
    upstream, ours = model_pair(family)
    store = PrefixCache(max_bytes=2**26)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[3])
    answer = no_placeholder_answers(ours)
    for _ in range(2):  # the second turn restores the first one's prompt
        output = greedy_output(ours, prompt.inputs(), max_new_tokens=4, prefix_cache=store, **answer)
        expected = greedy_output(upstream, prompt.inputs(), max_new_tokens=4, **answer)
        assert torch.equal(output.sequences, expected.sequences)
        assert _held(output.cache) == _held(expected.cache)
    assert store.stats.hits == 1
    new_tokens = [*output.sequences[0, prompt.length :].tolist(), 40, 41]
    continuing = continued(prompt, new_tokens)
    output = greedy_output(ours, continuing, max_new_tokens=2, cache=output.cache, **answer)
    assert_close(output.logits[0], reference_next_logits(upstream, prompt, new_tokens))
    expected = greedy_output(upstream, continuing, max_new_tokens=2, **answer)
    assert _held(output.cache) == _held(expected.cache)


def _held(cache) -> list:
    # Per layer: the tokens of K/V it holds, the inputs each convolution holds, whether it records its past
    held = []
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        convolutions = getattr(layer, "conv_states", {})
        held.append(
            (
                keys.shape[-2] if isinstance(keys, torch.Tensor) else None,
                tuple(state.shape[-1] for state in convolutions.values() if state is not None),
                bool(getattr(layer, "record_past", False)),
            )
        )
    return held
