"""Unit tests of the prefix store: chained keys, image-aware sharing, LRU eviction of leaves within the budget."""

from __future__ import annotations

import random
import threading

import pytest
import torch

from vlmprep.cache.prefix_cache import PrefixCache, token_key_material

ROOT = PrefixCache.root_key(("model", "salt"))


def _no_images(start: int, end: int) -> list[str]:
    return []


def _kv_for(tokens: list[int], layers: int = 2):
    """KV whose values encode the token ids, so a restored prefix can be checked against its tokens."""

    def block_kv(start: int, end: int):
        values = torch.tensor(tokens[start:end], dtype=torch.float32).view(1, -1, 1)
        return [(values.clone(), values.clone() + layer) for layer in range(layers)]

    return block_kv


def _insert(store: PrefixCache, tokens: list[int], images=_no_images, root=ROOT) -> int:
    return store.insert(root, tokens, images, _kv_for(tokens))


def test_longest_prefix_in_whole_blocks():
    store = PrefixCache(block_size=4)
    tokens = list(range(10, 21))  # 11 tokens: 2 whole blocks
    assert _insert(store, tokens) == 2
    match = store.match(ROOT, [*tokens[:6], 99, 98, 97], _no_images)
    assert match.tokens == 4
    keys, values = match.layer_kv(1, 3)
    assert keys.flatten().tolist() == [10, 11, 12] and values.flatten().tolist() == [11, 12, 13]
    assert store.match(ROOT, tokens, _no_images).tokens == 8
    assert store.match(PrefixCache.root_key(("other model",)), tokens, _no_images).tokens == 0


def test_images_are_part_of_the_key():
    store = PrefixCache(block_size=4)
    tokens = [1, 2, 3, 4, 5, 9, 9, 9, 9, 6, 7, 8, 0]

    def image(digest):
        return lambda start, end: [digest] if start < 9 and end > 5 else []

    _insert(store, tokens, image("A"))
    assert store.match(ROOT, tokens, image("A")).tokens == 12
    # Same ids, other image: the text block before the image is shared, nothing from the image's block on.
    assert store.match(ROOT, tokens, image("B")).tokens == 4


def test_shared_prefixes_are_stored_once_and_only_leaves_are_evicted():
    block_bytes = 2 * 2 * 4 * 4  # layers x (k, v) x 4 tokens x float32
    store = PrefixCache(block_size=4, max_bytes=3 * block_bytes)
    trunk = [1, 2, 3, 4]
    _insert(store, [*trunk, 5, 6, 7, 8])
    _insert(store, [*trunk, 9, 9, 9, 9])
    assert store.stats.entries == 3
    _insert(store, [*trunk, 7, 7, 7, 7])  # evicts the least recently used leaf, never the shared trunk
    assert store.stats.entries == 3 and store.stats.evictions == 1
    assert store.match(ROOT, [*trunk, 5, 6, 7, 8], _no_images).tokens == 4
    assert store.match(ROOT, [*trunk, 7, 7, 7, 7], _no_images).tokens == 8


def test_budget_holds_over_a_random_workload():
    rng = random.Random(0)
    store = PrefixCache(block_size=4, max_bytes=40 * 2 * 2 * 4 * 4)
    prefixes = [[rng.randint(0, 5) for _ in range(rng.randint(0, 12))] for _ in range(6)]
    for _ in range(400):
        tokens = rng.choice(prefixes) + [rng.randint(0, 50) for _ in range(rng.randint(1, 30))]
        if rng.random() < 0.5:
            _insert(store, tokens)
        match = store.match(ROOT, tokens, _no_images)
        if match.tokens:
            keys, _ = match.layer_kv(0, match.tokens)
            assert keys.flatten().tolist() == tokens[: match.tokens]  # evictions never break a stored chain
        stats = store.stats
        assert stats.bytes <= stats.max_bytes
        assert stats.entries == len(store)


def test_threads_share_one_store():
    store = PrefixCache(block_size=2, max_bytes=4096)
    errors = []

    def work(seed):
        rng = random.Random(seed)
        try:
            for _ in range(200):
                tokens = [rng.randint(0, 3) for _ in range(rng.randint(2, 12))]
                _insert(store, tokens)
                match = store.match(ROOT, tokens, _no_images)
                if match.tokens:
                    assert match.layer_kv(0, match.tokens)[0].flatten().tolist() == tokens[: match.tokens]
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert store.stats.bytes <= 4096


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"block_size": 2.5}, TypeError, "block_size"),
        ({"block_size": 0}, ValueError, "block_size"),
        ({"block_size": True}, TypeError, "block_size"),
        ({"max_bytes": -5}, ValueError, "max_bytes"),
        ({"max_bytes": "1GB"}, TypeError, "max_bytes"),
    ],
)
def test_bad_arguments_are_refused_at_construction(kwargs, error, message):
    with pytest.raises(error, match=message):
        PrefixCache(**kwargs)


def test_key_material_separates_what_changes_kv():
    store = PrefixCache(block_size=2)
    ids = torch.tensor([5, 6, 7, 8])
    causal = token_key_material(ids, {"token_type_ids": torch.zeros(4)})
    bidirectional = token_key_material(ids, {"token_type_ids": torch.tensor([0, 1, 1, 0])})
    store.insert(ROOT, causal, _no_images, _kv_for([5, 6, 7, 8]))
    assert store.match(ROOT, causal, _no_images).tokens == 4
    assert store.match(ROOT, bidirectional, _no_images).tokens == 0
    positions = token_key_material(ids, {"position_ids": torch.arange(4).expand(3, 4)})
    shifted = token_key_material(ids, {"position_ids": torch.tensor([[0, 1, 2, 3], [0, 1, 1, 3], [0, 1, 2, 3]])})
    store.insert(ROOT, positions, _no_images, _kv_for([5, 6, 7, 8]))
    assert store.match(ROOT, shifted, _no_images).tokens == 2
