"""The prefix cache across `generate` calls: multi-turn chats and shared prompts prefill each token once, exactly.

Every logit is compared with the plain transformers class holding the same weights: one uncached forward of the whole
prompt (or upstream `generate` on the same padded batch). Work is counted where it happens: vision-encoder calls and
the tokens each language-model forward is fed (`vlmprep.testing`).
"""

from __future__ import annotations

import logging as std_logging
import random

import pytest
import torch
from transformers import DynamicCache

from conftest import FOUNDATION_FAMILIES, model_pair
from support.chat import run_chat, turn_image_seeds
from support.references import (
    NO_SPECIAL_TOKENS,
    USER,
    Prompt,
    assert_batch_matches_upstream,
    assert_close,
    assert_same_steps,
    collate,
    encoder_runs,
    generate_batch_matching_upstream,
    generate_logits,
    no_placeholder_answers,
    strong_image_gemma3_pair,
    uncached_logits,
)
from support.traits import (
    families_with,
    has_multimodal_rope,
    has_state_layers,
    not_,
    padding_changes_cached_kv,
    positions_from_cache_length,
    qwen_like_prompts,
    sampled,
)
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, VIDEO, PrefillCounter, VisionRunCounter

SYSTEM = [2, *range(10, 21)]  # 12 tokens
SHORT_SYSTEM = SYSTEM[:8]

CHAT_FAMILIES = families_with(sampled("chat"))
# A turn's user text (lists) and images, images in turns 1 and 3.
USER_TURNS = [[SYSTEM, IMAGE, [30, 31]], [[32, 33, 34]], [[35], IMAGE, [36, 37]], [[38, 39]], [[40, 41, 42]]]


def image_sensitive_gemma3_pair():
    return strong_image_gemma3_pair(0.5)


def family_pair(family: str):
    return image_sensitive_gemma3_pair() if family == "gemma3" else model_pair(family)


@pytest.mark.parametrize("family", CHAT_FAMILIES)
def test_five_turn_chat_with_two_images_feeds_only_new_tokens(family):
    upstream, ours = family_pair(family)
    ours.encoder_cache.clear()
    store = PrefixCache(max_bytes=2**26)
    new_tokens = 4
    suppress = no_placeholder_answers(ours)
    seeds = turn_image_seeds(USER_TURNS)
    chat = run_chat(upstream, ours, USER_TURNS, seeds, store, new_tokens, **suppress)
    encoded, fed, minimum, prompt = chat.encoded, chat.fed, chat.minimum, chat.last_prompt
    # One encoder call per turn with a new image, for its items only (Idefics3 counts its crops as items)
    assert len(encoded) == 2 and sum(encoded) == ours.count_items(prompt.inputs()), "each image is encoded once"
    assert fed <= 1.02 * minimum, (fed, minimum)
    assert store.stats.hits == len(USER_TURNS) - 1


def test_the_images_reach_the_logits_of_the_gemma3_fixture():
    upstream, ours = image_sensitive_gemma3_pair()
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[1])
    second = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[2])
    difference = uncached_logits(upstream, first.inputs()) - uncached_logits(upstream, second.inputs())
    assert difference.abs().max() > 1e-2


def test_answer_of_any_length_is_reused_by_the_next_turn():
    upstream, ours = model_pair("llava")
    store = PrefixCache()
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30]], image_seeds=[1])
    sequences, _ = generate_logits(ours, prompt.inputs(), max_new_tokens=5, prefix_cache=store)
    answer = sequences[0, prompt.length :].tolist()
    follow_up = Prompt(ours.config, [SYSTEM, IMAGE, [30], answer, [44]], image_seeds=[1])
    reused_before = store.stats.tokens_reused
    _, logits = generate_logits(ours, follow_up.inputs(), max_new_tokens=1, prefix_cache=store)
    assert store.stats.tokens_reused - reused_before == sequences.shape[1] - 1
    assert_close(logits[0], uncached_logits(upstream, follow_up.inputs()))


# -- Soak: random shared prefixes, images, batches, salts, small budgets ----------------------------------------------


def _soak(family: str, calls: int, seed: int) -> dict:
    upstream, ours = family_pair(family)
    counts = dict.fromkeys(("calls", "batched", "continued", "salted", "hits", "tokens_reused", "evictions"), 0)
    rng = random.Random(seed)
    pad_id = ours.generation_config.pad_token_id or 0
    suppress = no_placeholder_answers(ours)
    systems = [[2, *rng.sample(range(10, 99), rng.randint(3, 14))] for _ in range(3)]
    conversations: list[tuple[list, list[int]]] = []  # earlier single-row prompts with their answers
    store = None
    for call in range(calls):
        if call % 60 == 0:
            if store is not None:
                _add_store_counts(counts, store)
            store = PrefixCache(max_bytes=rng.choice([8, 24, 64, 256]) * 1024)
        prompts = []
        rows = rng.choice([1, 1, 1, 2, 3])
        for _ in range(rows):
            if rows == 1 and conversations and rng.random() < 0.3:
                counts["continued"] += 1
                segments, seeds = rng.choice(conversations)
                segments, seeds = [*segments, [rng.randint(10, 99) for _ in range(rng.randint(1, 4))]], list(seeds)
            else:
                segments, seeds = [rng.choice(systems)], []
                if rows > 1 or rng.random() < 0.6:  # a batch's rows all have one image (or none would)
                    segments.append(IMAGE)
                    seeds.append(rng.randint(0, 3))
                segments.append([rng.randint(10, 99) for _ in range(rng.randint(1, 6))])
            prompts.append((segments, seeds))
        built = [Prompt(ours.config, segments, image_seeds=seeds) for segments, seeds in prompts]
        inputs = built[0].inputs() if len(built) == 1 else collate(built, pad_id)
        salt = rng.choice([None, None, "tenant-a", "tenant-b"])
        counts["calls"] += 1
        counts["batched"] += len(built) > 1
        counts["salted"] += salt is not None
        kwargs = {"cache_salt": salt} if salt is not None else {}
        new_tokens = rng.randint(1, 3)
        sequences, logits = generate_logits(
            ours, inputs, max_new_tokens=new_tokens, prefix_cache=store, **suppress, **kwargs
        )
        stats = store.stats
        assert stats.bytes <= stats.max_bytes, f"call {call}: {stats}"
        if len(built) == 1:
            assert_close(logits[0], uncached_logits(upstream, inputs))
            segments, seeds = prompts[0]
            conversations.append(([*segments, sequences[0, built[0].length :].tolist()], seeds))
            conversations = conversations[-8:]
        else:
            _, expected = generate_logits(upstream, inputs, max_new_tokens=new_tokens, **suppress)
            for step_actual, step_expected in zip(logits, expected, strict=True):
                assert_close(step_actual, step_expected)
    assert store.stats.hits > 0
    _add_store_counts(counts, store)
    return counts


def _add_store_counts(counts: dict, store: PrefixCache) -> None:
    stats = store.stats
    counts["hits"] += stats.hits
    counts["tokens_reused"] += stats.tokens_reused
    counts["evictions"] += stats.evictions


@pytest.mark.parametrize("family", families_with(sampled("mainstream"), not_(has_multimodal_rope)))
def test_random_soak_short(family):
    _soak(family, calls=50, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("family", families_with(sampled("mainstream")))
def test_random_soak(family):
    counts = _soak(family, calls=500, seed=2)
    print(f"soak {family}: {counts}")  # shown with `pytest -s` (docs/benchmarks.md reports them)
    assert counts["calls"] == 500 and counts["hits"] > 0 and counts["evictions"] > 0


def test_a_restored_cache_never_shares_memory_with_the_store():
    """A hit hands the call views of the stored KV (no copy); the cache the call returns holds copies of its own."""
    upstream, ours = model_pair("llava")
    store = PrefixCache()
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32]], image_seeds=[0])
    generate_logits(ours, prompt.inputs(), max_new_tokens=2, prefix_cache=store)
    stored = [kv for node in store._tree.recency.values() for pair in node.kv for kv in pair]
    before = [tensor.clone() for tensor in stored]
    output = ours.generate(
        **prompt.inputs(), max_new_tokens=2, do_sample=False, prefix_cache=store, return_dict_in_generate=True
    )
    assert store.stats.tokens_reused > 0
    stored_memory = {tensor.untyped_storage().data_ptr() for tensor in stored}
    for layer in output.past_key_values.layers:
        assert layer.keys.untyped_storage().data_ptr() not in stored_memory
        assert layer.values.untyped_storage().data_ptr() not in stored_memory
    for tensor, copy in zip(stored, before, strict=True):
        assert torch.equal(tensor, copy)


# -- Foundation families: conversations, shared system prompts, padded batches ----------------------------------------


def _check_against_upstream(upstream, ours_logits, prompt_inputs, max_new_tokens, **kwargs):
    _, expected = generate_logits(upstream, prompt_inputs, max_new_tokens=max_new_tokens, **kwargs)
    for step_actual, step_expected in zip(ours_logits, expected, strict=True):
        assert_close(step_actual, step_expected)


@pytest.mark.parametrize("family", families_with(sampled("mainstream"), not_(has_multimodal_rope)))
def test_five_turn_conversation_prefills_each_token_once(family):
    upstream, ours = model_pair(family)
    store = PrefixCache(block_size=8)
    ours.encoder_cache.clear()
    new_tokens = 3
    user_turns = [[SYSTEM, IMAGE, [30, 31]], [[32, 33, 34]], [[35], IMAGE, [36, 37]], [[38, 39]], [[40, 41, 42]]]
    segments, seeds = [], []
    total_prefilled = ideal_prefilled = previous_known = 0
    vision_runs = 0
    for turn, user in enumerate(user_turns):
        segments += user
        seeds += [100 + turn] * sum(1 for s in user if s is IMAGE)
        prompt = Prompt(ours.config, segments, image_seeds=seeds)
        # A random model may answer with an image placeholder, which would make the next prompt invalid
        no_placeholders = {"suppress_tokens": [ours.config.image_token_id]}
        with VisionRunCounter(ours) as runs, PrefillCounter(ours) as counter:
            sequences, logits = generate_logits(
                ours, prompt.inputs(), max_new_tokens=new_tokens, prefix_cache=store, **no_placeholders
            )
        vision_runs += runs.images
        _check_against_upstream(upstream, logits, prompt.inputs(), new_tokens, **no_placeholders)
        total_prefilled += counter.lengths[0]  # one prefill forward; the decode steps that follow feed one token each
        # Tokens no earlier call computed: the new user text and the previous answer's last token.
        ideal_prefilled += prompt.length - previous_known
        previous_known = sequences.shape[1] - 1  # KV of prompt + answer, except the last answer token
        segments.append(sequences[0, prompt.length :].tolist())
    assert vision_runs == 2
    # Token-granular sharing: each turn prefills exactly the tokens no earlier call computed.
    assert total_prefilled == ideal_prefilled
    assert store.stats.tokens_prefilled == total_prefilled


def test_same_system_prompt_different_images_reuses_only_the_system_prompt():
    upstream, ours = model_pair("gemma3")
    store = PrefixCache(block_size=4)
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[1])
    second = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[2])  # identical ids, other image
    image_start = int((first.input_ids[0] == ours.config.image_token_id).nonzero()[0])
    generate_logits(ours, first.inputs(), max_new_tokens=2, prefix_cache=store)
    reused_before = store.stats.tokens_reused
    _, logits = generate_logits(ours, second.inputs(), max_new_tokens=2, prefix_cache=store)
    # Every token before the image (the system prompt and the begin-of-image token), nothing from the image on
    assert store.stats.tokens_reused - reused_before == image_start >= len(SYSTEM)
    _check_against_upstream(upstream, logits, second.inputs(), 2)


def test_hit_ending_mid_image_is_exact_for_gemma3():
    upstream, ours = model_pair("gemma3")
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32]], image_seeds=[5])
    second = Prompt(ours.config, [SYSTEM, IMAGE, [40, 41]], image_seeds=[5])
    image = (second.input_ids[0] == ours.config.image_token_id).nonzero().flatten()
    # Sharing is to the token, so the stored row ends inside the image only when the budget cuts it there
    probe = PrefixCache()
    generate_logits(ours, first.inputs(), max_new_tokens=1, prefix_cache=probe)
    token_bytes = probe.stats.bytes // probe.stats.tokens
    store = PrefixCache(max_bytes=token_bytes * int(image[0] + image[-1]) // 2)
    generate_logits(ours, first.inputs(), max_new_tokens=1, prefix_cache=store)
    reused_before = store.stats.tokens_reused
    with PrefillCounter(ours) as counter:
        _, logits = generate_logits(ours, second.inputs(), max_new_tokens=2, prefix_cache=store)
    reused = store.stats.tokens_reused - reused_before
    assert int(image[0]) < reused < int(image[-1]), "the hit ends inside the image"
    assert counter.lengths[0] == second.length - reused, "no roll-back: the stored KV saw the whole image"
    assert ours.config.text_config.sliding_window < reused, "sliding-window layers are restored, not just full ones"
    _check_against_upstream(upstream, logits, second.inputs(), 2)


@pytest.mark.parametrize("family", FOUNDATION_FAMILIES)
def test_left_padded_batch_with_rows_hitting_different_lengths(family):
    """The batch resumes from the shortest row's hit (in padded positions); each row equals transformers alone."""
    upstream, ours = model_pair(family)
    store = PrefixCache(block_size=4)
    long_row = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[3])
    short_row = Prompt(ours.config, [[2, 50, 51, 52, 53, 54], IMAGE, [55]], image_seeds=[4])
    generate_logits(ours, long_row.inputs(), max_new_tokens=1, prefix_cache=store)
    generate_logits(ours, short_row.inputs(), max_new_tokens=1, prefix_cache=store)
    generate_batch_matching_upstream(upstream, ours, [long_row, short_row], prefix_cache=store)


RANDOM_CALLS = 40  # per family; every step of every row is checked against transformers


def _random_row(rng: random.Random, system_prompts: list, history: list) -> tuple[list, list]:
    """Segments and image seeds of one row: a system prompt or an earlier row with its answer, then 0-2 images
    (text between them) and new text."""
    if history and rng.random() < 0.3:
        segments, seeds = rng.choice(history)
        segments, seeds = list(segments), list(seeds)
    else:
        segments, seeds = [rng.choice(system_prompts)], []
    for _ in range(rng.choice([0, 0, 1, 2])):
        segments += [IMAGE, [rng.randint(10, 99)]]
        seeds.append(rng.randint(0, 3))
    segments.append([rng.randint(10, 99) for _ in range(rng.randint(1, 6))])
    return segments, seeds


@pytest.mark.parametrize(
    "family", families_with(sampled("mainstream"), not_(has_multimodal_rope))
)  # PaliGemma's prompt is one bidirectional block: no hits
def test_budget_and_exactness_over_a_random_workload(family):
    """Random calls through one small store: batches of 1-3 left-padded rows with 0-2 images each, rows that continue
    an earlier row's answer, 1-3 new tokens. Every step of every row equals transformers' uncached forward of that
    row's prompt and answer so far; the store stays within its budget, evicts, and hits."""
    upstream, ours = model_pair(family)
    rng = random.Random(0)
    store = PrefixCache(block_size=4, max_bytes=32 * 1024)
    system_prompts = [[2, *rng.sample(range(10, 99), 8)] for _ in range(3)]
    history: list[tuple[list, list]] = []
    for _ in range(RANDOM_CALLS):
        rows = [_random_row(rng, system_prompts, history) for _ in range(rng.choice([1, 1, 2, 3]))]
        prompts = [Prompt(ours.config, segments, image_seeds=seeds) for segments, seeds in rows]
        inputs = prompts[0].inputs() if len(prompts) == 1 else collate(prompts, ours.generation_config.pad_token_id)
        sequences, logits = generate_logits(
            ours, inputs, max_new_tokens=rng.randint(1, 3), prefix_cache=store, **NO_SPECIAL_TOKENS
        )
        assert store.stats.bytes <= store.max_bytes
        assert_batch_matches_upstream(upstream, prompts, sequences, logits)
        width = sequences.shape[1] - len(logits)
        history += [
            ([*segments, sequences[row, width:].tolist()], seeds) for row, (segments, seeds) in enumerate(rows)
        ]
    assert store.stats.evictions > 0 and store.stats.hits > 0


def test_salt_isolates_entries_and_a_passed_cache_bypasses_the_store():
    _, ours = model_pair("llava")
    store = PrefixCache(block_size=4)
    prompt = Prompt(ours.config, [SYSTEM, [30, 31]])
    generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store, cache_salt="tenant-a")
    reused = store.stats.tokens_reused
    generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store, cache_salt="tenant-b")
    assert store.stats.tokens_reused == reused
    generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store, cache_salt="tenant-a")
    assert store.stats.tokens_reused > reused


def test_model_attribute_turns_it_on_for_every_call():
    _, ours = model_pair("llava")
    store = PrefixCache(block_size=4)
    ours.prefix_cache = store
    try:
        prompt = Prompt(ours.config, [SYSTEM, [30, 31]])
        generate_logits(ours, prompt.inputs(), max_new_tokens=1)
        generate_logits(ours, prompt.inputs(), max_new_tokens=1)
        assert store.stats.hits == 1
    finally:
        ours.prefix_cache = None
    with pytest.raises(TypeError, match="PrefixCache"):
        ours.prefix_cache = {}


# -- Videos, padding offsets, and when the store is skipped -----------------------------------------------------------


# Hybrid decoders' turns: tests/scenarios/test_prefix_cache_hybrid.py
@pytest.mark.parametrize("family", families_with(qwen_like_prompts, not_(has_state_layers)))
def test_prefix_cache_across_turns_and_interleaved_requests(family):
    """Each turn adds an image or a video; another request runs between turns; every turn resumes from the prefix
    cache and is exact, with each image and video encoded once."""
    upstream, ours = model_pair(family)
    store = PrefixCache(block_size=4)
    ours.encoder_cache.clear()
    config = ours.config
    no_placeholders = {"suppress_tokens": [config.image_token_id, config.video_token_id, 110, 111]}
    other = Prompt(config, [[2, 60], IMAGE, [61], VIDEO, [62]], image_seeds=[40, 41])
    segments, seeds, encoded = [], [], []
    for turn, user in enumerate(([SHORT_SYSTEM, IMAGE, [30, 31]], [[32], VIDEO, [33]], [[34], IMAGE, [35, 36]])):
        segments += user
        seeds.append(20 + turn)
        prompt = Prompt(config, segments, image_seeds=seeds)
        prefilled_before = store.stats.tokens_prefilled
        with encoder_runs(ours, encoder_cache_off=False) as runs:
            sequences, logits = generate_logits(
                ours, prompt.inputs(), max_new_tokens=2, prefix_cache=store, **no_placeholders
            )
        encoded += runs.batch_sizes
        if turn > 0:  # resumed from the store: only the new part (and a partial block) is prefilled
            assert store.stats.tokens_prefilled - prefilled_before < prompt.length - 8
        _, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2, **no_placeholders)
        assert_same_steps(logits, expected_logits)
        generate_logits(ours, other.inputs(), max_new_tokens=1, prefix_cache=store)  # another request in between
        segments.append(sequences[0, prompt.length :].tolist())
    assert encoded == [1, 1, 1]  # each turn encodes only its new image or video


@pytest.mark.parametrize(
    "family",
    families_with(positions_from_cache_length)
    + families_with(padding_changes_cached_kv)
    + families_with(sampled("mainstream"), not_(has_multimodal_rope)),
)
def test_prefix_store_serves_no_kv_computed_at_another_padding_offset(family):
    # EXAONE 4.5 and HyperCLOVAX number decoder positions by cache place, left padding included, and Llama 4's NoPE
    # layers scale queries by it: a row stored at one padding offset must not serve a row at another (found by the
    # differential test for the first two).
    upstream, ours = model_pair(family)
    pad = ours.generation_config.pad_token_id
    store = PrefixCache()
    first, second, third = (
        Prompt(ours.config, [ids]) for ids in (list(range(5, 25)), list(range(30, 42)), SHORT_SYSTEM)
    )
    generate_logits(ours, collate([first, second], pad), max_new_tokens=1, prefix_cache=store)
    batch = collate([third, second], pad)
    _, logits = generate_logits(ours, batch, max_new_tokens=2, prefix_cache=store)
    _, expected = generate_logits(upstream, batch, max_new_tokens=2)
    for step, expected_step in zip(logits, expected, strict=True):
        assert_close(step, expected_step)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"num_beams": 2}, "beam search"),
        ({"use_cache": False}, "use_cache=False"),
        ({"num_return_sequences": 2, "do_sample": True}, "num_return_sequences"),
        ({"cache": "caller"}, "a `cache` is passed"),
    ],
    ids=["beams", "no_cache", "return_sequences", "passed_cache"],
)
def test_a_skipped_prefix_cache_says_why_once(kwargs, reason, capsys):
    _, ours = model_pair("llava")
    prompt = Prompt(ours.config, [SHORT_SYSTEM, IMAGE, USER])
    if kwargs.get("cache") == "caller":
        kwargs = {"cache": DynamicCache(config=ours.config)}
    std_logging.Logger.warning_once.cache_clear()  # once per process: start from a clean slate
    store = PrefixCache()
    for _ in range(2):
        ours.generate(**prompt.inputs(), max_new_tokens=1, prefix_cache=store, **kwargs)
        kwargs.pop("cache", None)
    err = capsys.readouterr().err
    assert err.count("The prefix cache is not used") == 1 and reason in err


def test_prefix_cache_is_skipped_for_running_state_layers_in_a_static_cache(capsys):
    # LFM2-VL's conv layers keep a running state: their snapshots are cut from a dynamic cache's recorded inputs
    # (tests/scenarios/test_prefix_cache_hybrid.py), which a static cache does not keep. Saying so beats storing nothing
    # silently on every call.
    from support.registry import FAMILY_CASES

    upstream, ours = model_pair("lfm2_vl")
    inputs = FAMILY_CASES["lfm2_vl"].build_inputs(ours.config, [[3, 4, 5], IMAGE, [6, 7]], [1])
    std_logging.Logger.warning_once.cache_clear()
    store = PrefixCache()
    static = {"cache_implementation": "static"}
    for _ in range(2):
        _, logits = generate_logits(ours, inputs, max_new_tokens=2, prefix_cache=store, **static)
    _, expected = generate_logits(upstream, inputs, max_new_tokens=2, **static)
    for step, expected_step in zip(logits, expected, strict=True):
        assert_close(step, expected_step)
    err = capsys.readouterr().err
    assert err.count("The prefix cache is not used") == 1 and "static cache" in err
    assert store.stats.lookups == 0 and store.stats.entries == 0
