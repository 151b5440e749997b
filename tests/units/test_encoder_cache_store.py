import random
from collections import OrderedDict

import pytest
import torch

from support.concurrency import run_in_threads
from vlmprep.cache.encoder_cache import EncoderCache, EncoderCacheStats


def _features(num_bytes: int, fill: float = 0.0) -> torch.Tensor:
    # float32: 4 bytes per element.
    return torch.full((num_bytes // 4,), fill)


def test_hit_and_miss_counting():
    cache = EncoderCache(max_bytes=1024)
    assert cache.get("a") is None
    assert cache.put("a", _features(64, 1.0))
    assert torch.equal(cache.get("a"), _features(64, 1.0))
    assert cache.get("a") is not None
    assert cache.get("b") is None
    assert "a" in cache and "b" not in cache  # membership is not a lookup
    stats = cache.stats
    assert (stats.hits, stats.misses, stats.encoder_runs_saved) == (2, 2, 2)
    assert (stats.entries, stats.bytes, stats.max_bytes, stats.evictions) == (1, 64, 1024, 0)
    assert isinstance(stats, EncoderCacheStats)


def test_get_many():
    cache = EncoderCache(max_bytes=1024)
    cache.put("a", _features(16, 1.0))
    cache.put("b", _features(16, 2.0))
    values = cache.get_many(["a", "x", "b"])
    assert values[1] is None
    assert values[0][0].item() == 1.0 and values[2][0].item() == 2.0
    assert (cache.stats.hits, cache.stats.misses) == (2, 1)


def test_lru_eviction_order():
    cache = EncoderCache(max_bytes=300)
    for key in "abc":
        assert cache.put(key, _features(100))
    cache.get("a")  # recency now: b, c, a
    assert cache.put("d", _features(100))  # evicts b
    assert "b" not in cache and all(k in cache for k in "acd")
    assert cache.put("e", _features(200))  # evicts c, then a
    assert "c" not in cache and "a" not in cache and "d" in cache and "e" in cache
    assert "d" in cache  # __contains__ does not refresh d
    assert cache.put("f", _features(100))  # evicts d (least recent), not e
    assert "d" not in cache and "e" in cache and "f" in cache
    stats = cache.stats
    assert (stats.evictions, stats.entries, stats.bytes) == (4, 2, 300)


def test_reput_refreshes_and_resizes():
    cache = EncoderCache(max_bytes=250)
    cache.put("a", _features(100))
    cache.put("b", _features(100))
    cache.put("a", _features(200, 7.0))  # refreshes a; must evict b to fit (a's old bytes are released first)
    assert "b" not in cache and cache.get("a")[0].item() == 7.0
    assert cache.stats.bytes == 200 and len(cache) == 1


def test_oversized_entry_not_stored():
    cache = EncoderCache(max_bytes=100)
    cache.put("a", _features(40))
    assert not cache.put("big", _features(104))
    assert "big" not in cache and "a" in cache
    assert not cache.put("a", _features(104))  # leaves the existing entry alone
    assert cache.stats.bytes == 40 and cache.stats.evictions == 0
    assert cache.put("exact", _features(100))
    assert cache.stats.bytes == 100 and "a" not in cache


def test_nested_values_and_detach():
    weight = torch.ones(4, requires_grad=True)
    features = (weight * 2).reshape(2, 2)  # has a grad_fn
    value = {"last": features, "layers": [features[0], (torch.zeros(3, dtype=torch.float16), None)]}
    cache = EncoderCache()
    assert cache.put("k", value)
    stored = cache.get("k")
    assert stored["last"].grad_fn is None and not stored["last"].requires_grad
    assert stored["layers"][0].grad_fn is None
    assert isinstance(stored["layers"], list) and isinstance(stored["layers"][1], tuple)
    assert cache.stats.bytes == 4 * 4 + 2 * 4 + 3 * 2
    with pytest.raises(TypeError):
        cache.put("bad", ["not a tensor"])


def test_views_of_a_batch_do_not_pin_the_batch():
    batch = torch.randn(8, 16, 32)  # (images, tokens, dim)
    cache = EncoderCache()
    cache.put("img0", batch[0])
    stored = cache.get("img0")
    assert torch.equal(stored, batch[0])
    assert stored.untyped_storage().nbytes() == 16 * 32 * 4


def test_clear():
    cache = EncoderCache(max_bytes=1000)
    for key in range(5):
        cache.put(key, _features(100))
    cache.get(0)
    cache.clear()
    assert len(cache) == 0 and 0 not in cache
    stats = cache.stats
    assert (stats.bytes, stats.entries, stats.hits) == (0, 0, 1)


def test_shrinking_max_bytes_evicts_lru():
    cache = EncoderCache(max_bytes=1000)
    for key in range(5):
        cache.put(key, _features(100))
    cache.get(0)  # recency: 1, 2, 3, 4, 0
    cache.max_bytes = 250
    assert [k for k in range(5) if k in cache] == [0, 4]
    stats = cache.stats
    assert (stats.bytes, stats.max_bytes, stats.evictions) == (200, 250, 3)
    cache.max_bytes = 0
    assert len(cache) == 0 and cache.stats.bytes == 0
    with pytest.raises(ValueError):
        cache.max_bytes = -1


class _ReferenceLRU:
    """The simplest possible model of the cache's contents: an ordered dict of key -> size."""

    def __init__(self, max_bytes):
        self.max_bytes = max_bytes
        self.entries = OrderedDict()

    def get(self, key):
        if key in self.entries:
            self.entries.move_to_end(key)
            return True
        return False

    def put(self, key, size):
        if size > self.max_bytes:
            return False
        self.entries.pop(key, None)
        self.entries[key] = size
        while sum(self.entries.values()) > self.max_bytes:
            self.entries.popitem(last=False)
        # The new entry itself is never evicted; it fits alone.
        return True

    def resize(self, max_bytes):
        self.max_bytes = max_bytes
        while sum(self.entries.values()) > max_bytes:
            self.entries.popitem(last=False)


def test_random_workload_matches_reference_lru():
    rng = random.Random(1234)
    cache = EncoderCache(max_bytes=2000)
    reference = _ReferenceLRU(2000)
    keys = [f"img{i}" for i in range(30)]
    hits = misses = 0
    for step in range(1500):
        op = rng.random()
        key = rng.choice(keys)
        if op < 0.45:
            size = rng.choice([4, 40, 400, 1200, 2400])  # 2400 > budget: never stored
            fill = float(step)
            assert cache.put(key, _features(size, fill)) == reference.put(key, size)
        elif op < 0.9:
            value = cache.get(key)
            expected = reference.get(key)
            assert (value is not None) == expected
            if expected:
                assert value.numel() * 4 == reference.entries[key]
            hits += expected
            misses += not expected
        elif op < 0.97:
            assert (key in cache) == (key in reference.entries)
        else:
            budget = rng.choice([500, 1000, 2000, 3000])
            cache.max_bytes = budget
            reference.resize(budget)
        stats = cache.stats
        assert stats.bytes <= stats.max_bytes
        assert stats.bytes == sum(reference.entries.values())
        assert stats.entries == len(reference.entries) == len(cache)
        assert all(k in cache for k in reference.entries)
    assert (stats.hits, stats.misses) == (hits, misses)
    assert hits > 50 and misses > 50  # the workload exercised both paths


def test_thread_safety():
    cache = EncoderCache(max_bytes=4096)
    lookups = []
    sizes = {f"k{i}": 4 * (1 + i % 50) for i in range(64)}

    def worker(seed):
        rng = random.Random(seed)
        count = 0
        for _ in range(500):
            key = rng.choice(list(sizes))
            if rng.random() < 0.5:
                cache.put(key, _features(sizes[key]))
            else:
                value = cache.get(key)
                count += 1
                assert value is None or value.numel() * 4 == sizes[key]
            if rng.random() < 0.01:
                cache.max_bytes = rng.choice([1024, 4096])
        lookups.append(count)

    run_in_threads(worker, 8)
    stats = cache.stats
    stored = [key for key in sizes if key in cache]
    assert stats.entries == len(cache) == len(stored)
    assert stats.bytes == sum(sizes[key] for key in stored) <= stats.max_bytes
    assert stats.hits + stats.misses == sum(lookups)
    assert stats.encoder_runs_saved == stats.hits
