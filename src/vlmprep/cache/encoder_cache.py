"""A content-addressed, byte-budgeted LRU of per-image vision-encoder outputs.

One entry is one image's features (e.g. `(tokens, dim)`, possibly with per-layer extras), keyed by whatever the caller
builds from the model identity and the image's content hash (see `vlmprep.cache.hashing`). A hit means one image the
vision encoder does not run on again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

# The default budget of an `EncoderCache`, and of the one every drop-in model carries: 512 MiB.
DEFAULT_MAX_BYTES = 512 * 2**20

__all__ = ["EncoderCache", "EncoderCacheStats"]

# A tensor, or a (possibly nested) tuple / list / dict of tensors.
EncoderOutput = Any


@dataclass
class EncoderCacheStats:
    """A snapshot of an [`EncoderCache`]'s counters.

    Args:
        hits (`int`): lookups that found an entry.
        misses (`int`): lookups that found none.
        evictions (`int`): entries dropped to make room (by `put` or by shrinking `max_bytes`).
        bytes (`int`): bytes held by the stored tensors, never more than `max_bytes`.
        entries (`int`): number of stored entries.
        encoder_runs_saved (`int`): images not re-encoded thanks to the cache; equal to `hits` (a repeat inside one
            call is not counted: the model looks each distinct item of a call up once).
        max_bytes (`int`): the byte budget.
    """

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    bytes: int = 0
    entries: int = 0
    encoder_runs_saved: int = 0
    max_bytes: int = 0


def _detached(value: EncoderOutput) -> tuple[EncoderOutput, int]:
    """A copy of `value`'s structure holding detached tensors, and the bytes those tensors hold."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        nbytes = tensor.numel() * tensor.element_size()
        # A per-image slice of a batched encoder output is a view that keeps the whole batch's storage alive; cloning
        # it makes the memory actually held match the bytes the budget counts.
        if tensor.layout == torch.strided and tensor.untyped_storage().nbytes() > nbytes:
            tensor = tensor.clone(memory_format=torch.contiguous_format)
        return tensor, nbytes
    if value is None:
        return None, 0
    if isinstance(value, Mapping):
        items = {key: _detached(item) for key, item in value.items()}
        return {key: item for key, (item, _) in items.items()}, sum(n for _, n in items.values())
    if isinstance(value, list | tuple):
        items = [_detached(item) for item in value]
        stored = [item for item, _ in items]
        if isinstance(value, list):
            container = stored
        elif hasattr(value, "_fields"):  # namedtuple
            container = type(value)(*stored)
        else:
            container = tuple(stored)
        return container, sum(n for _, n in items)
    raise TypeError(f"Encoder outputs must be tensors or tuples/lists/dicts of tensors, got {type(value).__name__}.")


class EncoderCache:
    """Content-addressed, byte-budgeted, thread-safe LRU of per-image encoder outputs.

    Values are stored detached (a cached feature never holds an autograd graph) and are returned as stored, without a
    copy: do not modify a returned tensor in place. When a `put` would exceed `max_bytes`, least-recently-used entries
    are evicted until it fits; an entry larger than the whole budget is not stored.

    A drop-in model looks each distinct item of a call up once: an item the call holds twice is one lookup (one hit
    or one miss) and, on a miss, one encoding and one `put`.

    Args:
        max_bytes (`int`, *optional*, defaults to `512 * 2**20`):
            Byte budget: the sum of `numel() * element_size()` over every stored tensor never exceeds it. Settable;
            lowering it evicts at once.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.cache.encoder_cache import EncoderCache
    >>> cache = EncoderCache(max_bytes=1024)
    >>> cache.put(("my-model", "image-hash"), torch.ones(4, 32))  # 4 * 32 * 4 bytes = 512
    True
    >>> cache.get(("my-model", "image-hash")).shape
    torch.Size([4, 32])
    >>> cache.get(("my-model", "other-hash")) is None
    True
    >>> stats = cache.stats
    >>> stats.hits, stats.misses, stats.bytes, stats.entries
    (1, 1, 512, 1)

    ```
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES):
        self._lock = threading.Lock()
        # key -> (value, nbytes); order is recency, least recent first.
        self._entries: OrderedDict[Hashable, tuple[EncoderOutput, int]] = OrderedDict()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._max_bytes = self._check_max_bytes(max_bytes)

    @staticmethod
    def _check_max_bytes(max_bytes: int) -> int:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"`max_bytes` must be a non-negative int, got {max_bytes!r}.")
        return max_bytes

    @property
    def max_bytes(self) -> int:
        """`int`: the byte budget. Setting a lower value evicts least-recently-used entries until they fit."""
        return self._max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        value = self._check_max_bytes(value)
        with self._lock:
            self._max_bytes = value
            self._evict_to(value)

    def _evict_to(self, budget: int) -> None:
        # Caller holds the lock.
        while self._bytes > budget:
            _, (_, nbytes) = self._entries.popitem(last=False)
            self._bytes -= nbytes
            self._evictions += 1

    def get(self, key: Hashable) -> EncoderOutput | None:
        """Look up `key`, counting a hit or a miss; a hit becomes the most recently used entry.

        Args:
            key (`Hashable`): the entry's key.

        Returns:
            The stored value, or `None` if `key` is not cached.
        """
        with self._lock:
            return self._get_locked(key)

    def _get_locked(self, key: Hashable) -> EncoderOutput | None:
        entry = self._entries.get(key)
        if entry is None:
            self._misses += 1
            return None
        self._entries.move_to_end(key)
        self._hits += 1
        return entry[0]

    def get_many(self, keys: Iterable[Hashable]) -> list[EncoderOutput | None]:
        """Look up several keys under one lock acquisition, as [`~EncoderCache.get`] would one by one.

        Args:
            keys (`Iterable[Hashable]`): the keys, e.g. one per image of a prompt.

        Returns:
            `list`: the stored value or `None` for each key, in order.
        """
        keys = list(keys)
        with self._lock:
            return [self._get_locked(key) for key in keys]

    def put(self, key: Hashable, value: EncoderOutput) -> bool:
        """Store `value` under `key` as the most recently used entry, evicting least-recently-used entries to fit.

        Re-putting an existing key replaces its value and refreshes its recency.

        Args:
            key (`Hashable`): the entry's key.
            value (`torch.Tensor` or a nested `tuple`/`list`/`dict` of `torch.Tensor`):
                One image's encoder outputs. Tensors are stored detached; dict-like containers are stored as `dict`.

        Returns:
            `bool`: whether the value was stored. `False` when it alone is larger than `max_bytes`; the cache is then
            left unchanged.
        """
        # Detaching (and possibly cloning a view) happens outside the lock: it may copy memory.
        stored, nbytes = _detached(value)
        with self._lock:
            if nbytes > self._max_bytes:
                return False
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            # Evict before inserting, so the new entry (which fits on its own) is never its own victim.
            self._evict_to(self._max_bytes - nbytes)
            self._entries[key] = (stored, nbytes)
            self._bytes += nbytes
            return True

    def clear(self) -> None:
        """Drop every entry (e.g. after the model's weights change). Hit, miss and eviction counters are kept."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    @property
    def stats(self) -> EncoderCacheStats:
        """[`EncoderCacheStats`]: a consistent snapshot of the counters; later operations do not change it."""
        with self._lock:
            return EncoderCacheStats(
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                bytes=self._bytes,
                entries=len(self._entries),
                encoder_runs_saved=self._hits,
                max_bytes=self._max_bytes,
            )

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        # A membership test is not a lookup: no hit/miss counted, recency unchanged.
        with self._lock:
            return key in self._entries

    # A copy (`copy.copy`, `copy.deepcopy`, pickle, `torch.save` of a model holding the cache) is an empty cache with
    # the same budget and a lock of its own: a lock cannot be pickled, and features belong to the model instance that
    # computed them, so a copied model starts cold rather than sharing (or duplicating) the original's entries.

    def __getstate__(self) -> dict:
        return {"max_bytes": self._max_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def __repr__(self) -> str:
        stats = self.stats
        return (
            f"{type(self).__name__}(entries={stats.entries}, bytes={stats.bytes}, max_bytes={stats.max_bytes}, "
            f"hits={stats.hits}, misses={stats.misses}, evictions={stats.evictions})"
        )
