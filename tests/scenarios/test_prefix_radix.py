"""Acceptance of the token-granular prefix cache: multi-turn chats prefill only their new tokens, exactly.

Every logit is compared with the plain transformers class holding the same weights: one uncached forward of the whole
prompt (or upstream `generate` on the same padded batch).
"""

from __future__ import annotations

import random

import pytest
import torch

from conftest import model_pair
from helpers import Prompt, assert_close, collate, generate_logits, strong_image_gemma3_pair
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, VisionRunCounter

SYSTEM = [2, *range(10, 21)]  # 12 tokens
CHAT_FAMILIES = ["gemma3", "llava", "llava_next", "qwen2_vl", "idefics3"]
# A turn's user text (lists) and images, images in turns 1 and 3.
USER_TURNS = [[SYSTEM, IMAGE, [30, 31]], [[32, 33, 34]], [[35], IMAGE, [36, 37]], [[38, 39]], [[40, 41, 42]]]


def image_sensitive_gemma3_pair():
    return strong_image_gemma3_pair(0.5)


def family_pair(family: str):
    return image_sensitive_gemma3_pair() if family == "gemma3" else model_pair(family)


def no_placeholders(model) -> dict:
    """Answers without placeholder ids (they would make the next prompt invalid) or the padding id.

    `generate` infers an attention mask from the padding id when a prompt holds it, so an answer with it would mask
    its own token out of the next prompt, which the reference forward would attend to.
    """
    names = ("image_token_id", "video_token_id", "vision_start_token_id", "pad_token_id")
    ids = [getattr(model.config, name, None) for name in names] + [model.generation_config.pad_token_id]
    return {"suppress_tokens": sorted({i for i in ids if i is not None})}


def uncached_logits(upstream, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return upstream(**inputs, use_cache=False).logits[:, -1]


class DecoderTokenCounter:
    """Counts the tokens each decoder forward receives (a forward pre-hook on the language model)."""

    def __init__(self, model):
        self.decoder = model.get_decoder()
        self.lengths: list[int] = []

    def _hook(self, module, args, kwargs):
        embeds = kwargs.get("inputs_embeds")
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.lengths.append(int((embeds if embeds is not None else ids).shape[1]))

    def __enter__(self) -> DecoderTokenCounter:
        self._handle = self.decoder.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()


@pytest.mark.parametrize("family", CHAT_FAMILIES)
def test_five_turn_chat_with_two_images_feeds_only_new_tokens(family):
    upstream, ours = family_pair(family)
    ours.encoder_cache.clear()
    store = PrefixCache(max_bytes=2**26)
    new_tokens = 4
    suppress = no_placeholders(ours)
    segments, seeds = [], []
    fed = minimum = known = 0
    encoded = []  # images per vision-encoder call
    for turn, user in enumerate(USER_TURNS):
        segments += user
        seeds += [100 + turn] * sum(1 for segment in user if segment is IMAGE)
        prompt = Prompt(ours.config, segments, image_seeds=seeds)
        with VisionRunCounter(ours) as runs, DecoderTokenCounter(ours) as counter:
            sequences, logits = generate_logits(
                ours, prompt.inputs(), max_new_tokens=new_tokens, prefix_cache=store, **suppress
            )
        encoded += runs.batch_sizes
        # The prefill forward and one token per decode step
        assert counter.lengths[1:] == [1] * (len(logits) - 1)
        assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))
        fed += sum(counter.lengths)
        # The least any cache can feed: the tokens no earlier call computed (the new user text, the images, the
        # previous answer's last token), then one token per decode step
        minimum += prompt.length - known + len(logits) - 1
        known = sequences.shape[1] - 1  # KV of prompt and answer, except the answer's last token
        segments.append(sequences[0, prompt.length :].tolist())
    # One encoder call per turn with a new image, for its items only (Idefics3 counts its crops as items)
    assert len(encoded) == 2 and sum(encoded) == ours.count_images(prompt.inputs()), "each image is encoded once"
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


# -- Soak: random shared prefixes, images, batches, salts, small budgets -----------------------------------------------


def _soak(family: str, calls: int, seed: int) -> dict:
    upstream, ours = family_pair(family)
    counts = dict.fromkeys(("calls", "batched", "continued", "salted", "hits", "tokens_reused", "evictions"), 0)
    rng = random.Random(seed)
    pad_id = ours.generation_config.pad_token_id or 0
    suppress = no_placeholders(ours)
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


@pytest.mark.parametrize("family", ["gemma3", "llava"])
def test_random_soak_short(family):
    _soak(family, calls=50, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gemma3", "llava", "qwen2_vl"])
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
