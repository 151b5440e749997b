"""The prefix cache across `generate` calls: multi-turn chats and shared system prompts prefill each token once."""

from __future__ import annotations

import random

import pytest

from conftest import FOUNDATION_FAMILIES, model_pair
from helpers import NO_SPECIAL_TOKENS, Prompt, assert_batch_matches_upstream, assert_close, collate, generate_logits
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, VisionRunCounter

SYSTEM = [2, *range(10, 21)]  # 12 tokens


class PrefillCounter:
    """Counts the tokens each language-model forward receives (prefill chunks and decode steps)."""

    def __init__(self, model):
        self.language_model = model.model.language_model
        self.lengths: list[int] = []

    def _hook(self, module, args, kwargs):
        embeds = kwargs.get("inputs_embeds")
        self.lengths.append(int(embeds.shape[1]))

    def __enter__(self):
        self._handle = self.language_model.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc):
        self._handle.remove()


def _check_against_upstream(upstream, ours_logits, prompt_inputs, max_new_tokens, **kwargs):
    _, expected = generate_logits(upstream, prompt_inputs, max_new_tokens=max_new_tokens, **kwargs)
    for step_actual, step_expected in zip(ours_logits, expected, strict=True):
        assert_close(step_actual, step_expected)


@pytest.mark.parametrize("family", ["gemma3", "llava"])
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
    batch = collate([long_row, short_row], ours.generation_config.pad_token_id)
    sequences, logits = generate_logits(ours, batch, max_new_tokens=2, prefix_cache=store, **NO_SPECIAL_TOKENS)
    assert_batch_matches_upstream(upstream, [long_row, short_row], sequences, logits)


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


@pytest.mark.parametrize("family", ["gemma3", "llava"])  # PaliGemma's prompt is one bidirectional block: no hits
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
