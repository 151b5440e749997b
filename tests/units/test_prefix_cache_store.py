"""Unit tests of the prefix store: a radix tree over token keys, image-aware sharing, LRU eviction within the budget."""

from __future__ import annotations

import random

import pytest
import torch

from support.concurrency import run_in_threads
from vlmprep.cache.prefix_cache import PrefixCache, key_material_array

ROOT = PrefixCache.root_key(("model", "salt"))


def _no_images(start: int, end: int) -> list[str]:
    return []


def _keys(tokens: list[int], images=_no_images, per_token: dict | None = None):
    """The store's token keys of a row of ids (no per-token inputs unless given), as the code builds them."""
    return key_material_array(torch.tensor(tokens, dtype=torch.long), per_token or {}, images)


def _kv_for(tokens: list[int], layers: int = 2):
    """KV whose values encode the token ids, so a restored prefix can be checked against its tokens."""

    def block_kv(start: int, end: int):
        values = torch.tensor(tokens[start:end], dtype=torch.float32).view(1, -1, 1)
        return [(values.clone(), values.clone() + layer) for layer in range(layers)]

    return block_kv


def _insert(store: PrefixCache, tokens: list[int], images=_no_images, root=ROOT) -> int:
    return store.insert_keys(root, _keys(tokens, images), _kv_for(tokens))


# layers x (k, v) x float32 (one head of dim 1), and the key: the id and 4 columns of image hash, int64
TOKEN_BYTES = 2 * 2 * 4 + 5 * 8


def test_longest_prefix_to_the_token():
    store = PrefixCache()
    tokens = list(range(10, 21))
    assert _insert(store, tokens) == 11
    match = store.match_keys(ROOT, _keys([*tokens[:6], 99, 98, 97], _no_images))
    assert match.tokens == 6
    keys, values = match.layer_kv(1, 3)
    assert keys.flatten().tolist() == [10, 11, 12] and values.flatten().tolist() == [11, 12, 13]
    assert store.match_keys(ROOT, _keys(tokens, _no_images)).tokens == 11
    assert store.match_keys(ROOT, _keys([*tokens, 5, 6], _no_images)).tokens == 11
    assert store.match_keys(PrefixCache.root_key(("other model",)), _keys(tokens, _no_images)).tokens == 0


def test_divergence_splits_an_edge_and_a_longer_row_extends_it():
    store = PrefixCache()
    first = [1, 2, 3, 4, 5, 6]
    _insert(store, first)
    assert _insert(store, [1, 2, 3]) == 0 and store.stats.entries == 1  # stored already: no split
    assert _insert(store, [1, 2, 3, 9, 9]) == 2  # the shared 3 tokens are stored once
    assert (store.stats.entries, store.stats.tokens, store.stats.bytes) == (3, 8, 8 * TOKEN_BYTES)
    assert _insert(store, [*first, 7, 8]) == 2  # a turn's answer extends the stored row, whatever its length
    for row in ([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 9, 9]):
        match = store.match_keys(ROOT, _keys(row, _no_images))
        assert match.tokens == len(row)
        assert match.layer_kv(0, len(row))[0].flatten().tolist() == row
    assert store.match_keys(ROOT, _keys([1, 2, 3, 9, 7], _no_images)).tokens == 4


def test_images_are_part_of_the_key():
    store = PrefixCache()
    tokens = [1, 2, 3, 4, 5, 9, 9, 9, 9, 6, 7, 8, 0]

    def image(digest):
        return lambda start, end: [digest] if start < 9 and end > 5 else []

    _insert(store, tokens, image("A"))
    assert store.match_keys(ROOT, _keys(tokens, image("A"))).tokens == 13
    # Same ids, other image: the text before the image is shared, nothing from the image's first token on.
    assert store.match_keys(ROOT, _keys(tokens, image("B"))).tokens == 5
    assert store.match_keys(ROOT, _keys(tokens, _no_images)).tokens == 5


def test_keys_carry_the_image_covering_each_token():
    spans = [(2, 5, "A"), (5, 7, "B")]

    def images(start, end):
        return [digest for low, high, digest in spans if low < end and high > start]

    keys = _keys([10] * 8, images, {"token_type_ids": torch.zeros(8, dtype=torch.long)})
    assert keys.shape == (8, 2 + 4) and (keys[:, :2] == [10, 0]).all()
    rows = [tuple(row) for row in keys[:, 2:].tolist()]
    no_image, image_a, image_b = rows[0], rows[2], rows[5]
    assert no_image == (0, 0, 0, 0) and len({no_image, image_a, image_b}) == 3
    assert rows == [no_image] * 2 + [image_a] * 3 + [image_b] * 2 + [no_image]
    assert _keys([], images).shape[0] == 0


def test_shared_prefixes_are_stored_once_and_only_leaves_are_evicted():
    store = PrefixCache(max_bytes=12 * TOKEN_BYTES)
    trunk = [1, 2, 3, 4]
    _insert(store, [*trunk, 5, 6, 7, 8])
    _insert(store, [*trunk, 9, 9, 9, 9])
    assert store.stats.entries == 3
    _insert(store, [*trunk, 7, 7, 7, 7])  # evicts the least recently used leaf, never the shared trunk
    assert store.stats.entries == 3 and store.stats.evictions == 1
    assert store.match_keys(ROOT, _keys([*trunk, 5, 6, 7, 8], _no_images)).tokens == 4
    assert store.match_keys(ROOT, _keys([*trunk, 7, 7, 7, 7], _no_images)).tokens == 8


def test_a_leaf_is_trimmed_only_as_much_as_needed():
    store = PrefixCache(max_bytes=10 * TOKEN_BYTES)
    _insert(store, [1, 2, 3, 4, 5, 6, 7, 8])
    assert _insert(store, [9, 8, 7, 6, 5, 4, 3, 2]) == 8
    assert store.stats.bytes == 10 * TOKEN_BYTES and store.stats.evictions == 1
    match = store.match_keys(ROOT, _keys([1, 2, 3, 4, 5, 6, 7, 8], _no_images))
    assert match.tokens == 2 and match.layer_kv(1, 2)[1].flatten().tolist() == [2, 3]
    # A row longer than the whole budget stores the first tokens that fit
    store = PrefixCache(max_bytes=3 * TOKEN_BYTES)
    assert _insert(store, [1, 2, 3, 4, 5]) == 3
    assert store.match_keys(ROOT, _keys([1, 2, 3, 4, 5], _no_images)).tokens == 3
    assert _insert(store, [1, 2, 3, 4, 5]) == 0
    assert PrefixCache(max_bytes=0).insert_keys(ROOT, _keys([1, 2]), _kv_for([1, 2])) == 0


def test_intervals_follow_the_edges_they_overlap():
    store = PrefixCache()
    block = (2, 5, b"block")
    store.insert_keys(ROOT, _keys([1, 2, 3, 4, 5, 6, 7]), _kv_for([1, 2, 3, 4, 5, 6, 7]), [block])
    _insert(store, [1, 2, 3, 4, 9])  # splits inside the block
    assert store.match_keys(ROOT, _keys([1, 2, 3], _no_images)).open_intervals == [block]
    assert store.match_keys(ROOT, _keys([1, 2], _no_images)).open_intervals == []
    match = store.match_keys(ROOT, _keys([1, 2, 3, 4, 5, 6, 7], _no_images))
    assert match.tokens == 7 and set(match.open_intervals) == {block}


def test_budget_holds_over_a_random_workload():
    rng = random.Random(0)
    store = PrefixCache(max_bytes=40 * TOKEN_BYTES)
    prefixes = [[rng.randint(0, 5) for _ in range(rng.randint(0, 12))] for _ in range(6)]
    for _ in range(400):
        tokens = rng.choice(prefixes) + [rng.randint(0, 50) for _ in range(rng.randint(1, 30))]
        if rng.random() < 0.5:
            _insert(store, tokens)
        match = store.match_keys(ROOT, _keys(tokens, _no_images))
        if match.tokens:
            keys, _ = match.layer_kv(0, match.tokens)
            assert keys.flatten().tolist() == tokens[: match.tokens]  # evictions never break a stored chain
        stats = store.stats
        assert stats.bytes <= stats.max_bytes
        assert stats.entries == len(store) and stats.bytes == stats.tokens * TOKEN_BYTES


def test_threads_share_one_store():
    store = PrefixCache(max_bytes=4096)

    def work(seed):
        rng = random.Random(seed)
        for _ in range(200):
            tokens = [rng.randint(0, 3) for _ in range(rng.randint(2, 12))]
            _insert(store, tokens)
            match = store.match_keys(ROOT, _keys(tokens, _no_images))
            if match.tokens:
                assert match.layer_kv(0, match.tokens)[0].flatten().tolist() == tokens[: match.tokens]

    run_in_threads(work, 6)
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


def test_block_size_is_accepted_and_ignored():
    store = PrefixCache(block_size=4)
    _insert(store, [1, 2, 3, 4, 5, 6])
    assert store.match_keys(ROOT, _keys([1, 2, 3, 4, 5, 9], _no_images)).tokens == 5
    assert store.block_size == 4


def test_key_material_separates_what_changes_kv():
    store = PrefixCache()
    ids = [5, 6, 7, 8]
    causal = _keys(ids, per_token={"token_type_ids": torch.zeros(4)})
    bidirectional = _keys(ids, per_token={"token_type_ids": torch.tensor([0, 1, 1, 0])})
    store.insert_keys(ROOT, causal, _kv_for(ids))
    assert store.match_keys(ROOT, causal).tokens == 4
    assert store.match_keys(ROOT, bidirectional).tokens == 1
    positions = _keys(ids, per_token={"position_ids": torch.arange(4).expand(3, 4)})
    shifted = _keys(ids, per_token={"position_ids": torch.tensor([[0, 1, 2, 3], [0, 1, 1, 3], [0, 1, 2, 3]])})
    store.insert_keys(ROOT, positions, _kv_for(ids))
    assert store.match_keys(ROOT, shifted).tokens == 2
