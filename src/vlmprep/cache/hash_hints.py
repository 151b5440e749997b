"""Content hashes remembered by a caller's hint: an item whose inputs a caller already knows (a server's media cache
returns an image's processed pixels by a hash of its raw bytes) is not hashed again.

`hash_item_inputs` reads every byte of an item's inputs (sha256). A caller that hands the very same processed inputs
again can name them with a hint (`item_hints`: `(modality, input index) -> hint`), for example the media cache's key
of the raw bytes and the image processor's signature. The first call with a hint hashes the inputs and remembers the
hash under the hint together with everything else that goes into the hash but is not named by the hint: the salt, the
encoder arguments, and the dtype and shape of every tensor of the item (an item zero-padded to another request's
largest item has another shape). A later call with the same hint and the same rest takes the remembered hash: the keys
of the encoder cache and of the prefix cache are exactly the ones hashing would give.

A hint is a promise by the caller: the same hint always names the same processed inputs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["HINTED_HASHES", "HintedHashStats", "HintedHashes", "hinted_hash"]


@dataclass
class HintedHashStats:
    """Counters of [`HintedHashes`].

    Args:
        hits (`int`): hashes taken by hint (items not hashed again).
        hashed (`int`): items with a hint hashed (first seen).
        entries (`int`): hashes remembered.
    """

    hits: int = 0
    hashed: int = 0
    entries: int = 0


class HintedHashes:
    """Content hashes by hint and inputs' layout, least recently used dropped beyond `max_entries`.

    Args:
        max_entries (`int`, *optional*, defaults to 4096): hashes remembered.
    """

    def __init__(self, max_entries: int = 4096):
        self.max_entries = max_entries
        self._hashes: OrderedDict[tuple, str] = OrderedDict()
        self._lock = threading.Lock()
        self._stats = HintedHashStats()

    @property
    def stats(self) -> HintedHashStats:
        """A snapshot of the counters."""
        with self._lock:
            return HintedHashStats(self._stats.hits, self._stats.hashed, len(self._hashes))

    def get_or_hash(self, key: tuple, compute: Callable[[], str]) -> str:
        """The hash remembered under `key`, or `compute()`'s (then remembered)."""
        with self._lock:
            known = self._hashes.get(key)
            if known is not None:
                self._hashes.move_to_end(key)
                self._stats.hits += 1
                return known
        digest = compute()
        with self._lock:
            self._stats.hashed += 1
            self._hashes[key] = digest
            while len(self._hashes) > self.max_entries:
                self._hashes.popitem(last=False)
        return digest

    def clear(self) -> None:
        """Forgets every remembered hash."""
        with self._lock:
            self._hashes.clear()


# The process's remembered hashes (servers and in-process callers share it; hints are the callers' own keys).
HINTED_HASHES = HintedHashes()


def hinted_hash(hint: object, inputs: Mapping[str, Any], salt: str | None, compute: Callable[[], str]) -> str:
    """The content hash of one item's `inputs`, remembered under `hint` (see the module docstring).

    Args:
        hint (`object`): the caller's name for these processed inputs (hashable); `None`: no hint, `compute()`.
        inputs (`Mapping[str, Any]`): everything `compute` hashes (the item's inputs and encoder arguments).
        salt (`str`, *optional*): the salt `compute` hashes with.
        compute (`Callable[[], str]`): hashes the inputs (`hash_item_inputs`).

    Returns:
        `str`: what `compute()` returns for these inputs.
    """
    layout = _layout(inputs) if hint is not None else None
    if layout is None:
        return compute()
    return HINTED_HASHES.get_or_hash((hint, salt, layout), compute)


def _layout(value: Any) -> tuple | str | None:
    # What the hint does not name: dtypes and shapes of tensors, the values of everything else; `None` for a value
    # whose value cannot be written down cheaply and exactly (then the item is hashed)
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.device.type)
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.shape)
    if isinstance(value, Mapping):
        items = [(str(key), _layout(item)) for key, item in sorted(value.items(), key=lambda kv: str(kv[0]))]
        return None if any(layout is None for _, layout in items) else ("map", tuple(items))
    if isinstance(value, (list, tuple)):
        items = [_layout(item) for item in value]
        return None if any(layout is None for layout in items) else ("seq", tuple(items))
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return repr(value)
    return None
