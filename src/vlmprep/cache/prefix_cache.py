"""An image-aware KV prefix store across `generate` calls: a radix tree over tokens.

Each stored row (a prompt and its answer) is a path from a root to a node; each edge holds a run of tokens and, for
every decoder layer, the KV of exactly those tokens (`radix_tree`). Edges split where stored rows diverge, so a lookup
returns the longest shared prefix to the token. A token's key is its key material (`key_material_array`: its id, its
token types, its position ids) plus the content hashes of the images whose placeholders cover it (`prefix_keys`); the
root names the model identity, the cache salt and the key-material layout. Two prompts whose placeholder ids are
identical but whose images, token types or positions differ therefore share nothing from the first differing token
on, while what comes before is shared. Eviction trims or drops least-recently-used leaf edges within a byte budget.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .layer_extras import LayerExtras
from .prefix_keys import (
    interval_digest,
    key_material_array,
    key_material_layout,
)
from .radix_tree import BlockKV, Interval, RadixTree
from .recurrent_state import StateSnapshot

__all__ = [
    "PrefixCache",
    "PrefixCacheStats",
    "PrefixMatch",
    "key_material_array",
    "key_material_layout",
]


@dataclass
class PrefixCacheStats:
    """A snapshot of a [`PrefixCache`]'s counters.

    Args:
        lookups (`int`): prompts (batch rows) looked up.
        hits (`int`): lookups that reused at least one token.
        tokens_reused (`int`): prompt tokens restored from the store instead of prefilled.
        tokens_shared (`int`):
            prompt tokens the store held (all but each prompt's last, which is always fed). Above `tokens_reused`
            where a resume point fell short of them: a hybrid decoder resumes only at a snapshot of its recurrent
            states (docs/prefix_cache.md says where they are taken), a batch at a block boundary; the difference was
            prefilled again.
        tokens_prefilled (`int`): prompt tokens prefilled by calls that used the store.
        bytes (`int`): bytes of stored KV, never more than `max_bytes`.
        tokens (`int`): tokens whose KV is stored (a prefix shared by several rows counts once).
        entries (`int`): stored edges of the tree (runs of tokens stored together).
        evictions (`int`): leaf edges trimmed or dropped to make room.
        max_bytes (`int`): the byte budget.
        snapshots (`int`): stored snapshots of a hybrid decoder's recurrent states (docs/prefix_cache.md).
        snapshot_bytes (`int`): their bytes (part of `bytes`).
    """

    lookups: int = 0
    hits: int = 0
    tokens_reused: int = 0
    tokens_shared: int = 0
    tokens_prefilled: int = 0
    bytes: int = 0
    tokens: int = 0
    entries: int = 0
    evictions: int = 0
    max_bytes: int = 0
    snapshots: int = 0
    snapshot_bytes: int = 0


class PrefixMatch:
    """The stored prefix of one prompt row.

    Args:
        tokens (`int`): matched tokens (before any capping by the caller).
        runs (`list[tuple[BlockKV, int]]`):
            the KV of each matched edge, with how many of its first tokens match (they add up to `tokens`). Edges are
            never written to: eviction and splits replace an edge's tensors, so a match stays valid.
        open_intervals (`list[tuple[int, int, bytes]]`):
            bidirectional blocks (start, end, digest) the matched KV was computed with.
        snapshots (`dict[int, StateSnapshot]`):
            recurrent-state snapshots at matched token counts (hybrid decoders resume only at one of them).
        extras (`LayerExtras`):
            what the stored rows hold per token beyond K/V (an indexer's keys), stored after the layers' K/V.
    """

    __slots__ = ("tokens", "runs", "open_intervals", "snapshots", "extras")

    def __init__(self, tokens: int = 0, runs: list | None = None, open_intervals: list | None = None):
        self.tokens = tokens
        self.runs: list[tuple[BlockKV, int]] = runs if runs is not None else []
        self.open_intervals: list[Interval] = open_intervals if open_intervals is not None else []
        self.snapshots: dict[int, StateSnapshot] = {}
        self.extras = LayerExtras()

    @property
    def kv(self) -> list[BlockKV]:
        """The KV of the matched runs of tokens, in order, per layer `(heads, tokens, head_dim)`."""
        return [[(k[:, :common], v[:, :common]) for k, v in kv] for kv, common in self.runs]

    def layer_kv(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of the first `length` matched tokens for one layer: `(heads, length, head_dim)` each."""
        first_kv, first_common = self.runs[0]
        if length <= first_common:  # one edge holds them all: views, no copy
            keys, values = first_kv[layer]
            return keys[:, :length], values[:, :length]
        keys, values, taken = [], [], 0
        for kv, common in self.runs:
            if taken >= length:
                break
            keys.append(kv[layer][0][:, : min(common, length - taken)])
            values.append(kv[layer][1][:, : min(common, length - taken)])
            taken += common
        return torch.cat(keys, dim=1), torch.cat(values, dim=1)

    def row_kv(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`layer_kv` as one batch row, `(1, heads, length, head_dim)` each (views when one edge holds them)."""
        first_kv, first_common = self.runs[0]
        if length <= first_common:  # one indexing operation per tensor: this runs for every layer of every hit
            keys, values = first_kv[layer]
            return keys[None, :, :length], values[None, :, :length]
        keys, values = self.layer_kv(layer, length)
        return keys[None], values[None]


class PrefixCache:
    """Stores the KV of finished prompts (and their answers) so later prompts that start the same way skip them.

    A radix tree over tokens: a lookup reuses every stored token the prompt shares, to the token (a chat turn
    prefills only its new text). Opt-in: pass `prefix_cache=` to `generate`, or set `model.prefix_cache`. One store
    may serve several models and threads; entries of different models (or cache salts) never mix.

    Args:
        max_bytes (`int`, *optional*, defaults to 1 GiB): budget for the stored KV.
        block_size (`int`, *optional*):
            ignored, kept so existing code runs: sharing used to be in blocks of this many tokens and is now at token
            granularity (see the migration guide).
        snapshot_tail (`int`, *optional*, defaults to 4):
            a hybrid decoder's answer positions, counted back from its end, whose recurrent states are stored (an
            answer re-sent with its last tokens changed resumes there). Each costs one snapshot's bytes.
        snapshot_every (`int`, *optional*, defaults to 256):
            also store a hybrid decoder's states every this many decoded tokens (`0`: never). The end of every prompt
            and stored row, and every item's end, always hold a snapshot (docs/prefix_cache.md).

    Example:

    ```python
    >>> from vlmprep import PrefixCache
    >>> store = PrefixCache(max_bytes=64 * 2**20)
    >>> store.stats.entries
    0

    ```
    """

    def __init__(
        self, max_bytes: int = 2**30, block_size: int | None = None, snapshot_tail: int = 4, snapshot_every: int = 256
    ):
        checked = (
            ("max_bytes", max_bytes, 0),
            ("block_size", block_size, 1),
            ("snapshot_tail", snapshot_tail, 0),
            ("snapshot_every", snapshot_every, 0),
        )
        for name, value, least in checked:
            if name == "block_size" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"`{name}` must be an int, got {value!r} ({type(value).__name__}). Pass e.g. `{name}=16`."
                )
            if value < least:
                raise ValueError(f"`{name}` must be at least {least}, got {value}.")
        self.block_size = block_size  # no effect: kept only so code passing it (and copies) keep working
        self.snapshot_tail, self.snapshot_every = snapshot_tail, snapshot_every
        self._tree = RadixTree(max_bytes)
        self._lock = threading.Lock()
        self._lookups = self._hits = self._tokens_reused = self._tokens_shared = self._tokens_prefilled = 0
        self._extras: dict[bytes, LayerExtras] = {}  # per root: what its rows hold per token beyond K/V

    @property
    def max_bytes(self) -> int:
        return self._tree.max_bytes

    @property
    def snapshot_policy(self) -> tuple[int, int]:
        """`(snapshot_tail, snapshot_every)`: where in an answer a hybrid decoder's states are stored."""
        return self.snapshot_tail, self.snapshot_every

    @property
    def stats(self) -> PrefixCacheStats:
        """A snapshot of the counters."""
        with self._lock:
            tree = self._tree
            return PrefixCacheStats(
                lookups=self._lookups,
                hits=self._hits,
                tokens_reused=self._tokens_reused,
                tokens_shared=self._tokens_shared,
                tokens_prefilled=self._tokens_prefilled,
                bytes=tree.bytes,
                tokens=tree.tokens,
                entries=tree.entries,
                evictions=tree.evictions,
                max_bytes=tree.max_bytes,
                snapshots=tree.snapshots,
                snapshot_bytes=tree.snapshot_bytes,
            )

    def clear(self) -> None:
        """Drop every stored entry (counters of past lookups are kept)."""
        with self._lock:
            self._tree.clear()
            self._extras.clear()

    def __len__(self) -> int:
        return len(self._tree)

    # -- keys ------------------------------------------------------------------------------------------------------

    @staticmethod
    def root_key(namespace: Sequence[str]) -> bytes:
        """The key every path starts from: the model identity and the cache salt."""
        return hashlib.sha256("\x1f".join(map(str, namespace)).encode()).digest()

    interval_digest = staticmethod(interval_digest)

    # -- lookup and insert -----------------------------------------------------------------------------------------

    def match_keys(self, root: bytes, keys: np.ndarray) -> PrefixMatch:
        """The longest stored prefix of a row, to the token.

        Args:
            root (`bytes`): `root_key(namespace)`.
            keys (`np.ndarray` of int64, shape `(seq_len, fields + 4)`): the row's token keys, without padding:
                `key_material_array(input_ids, per_token, items_between)`.

        Returns:
            `PrefixMatch`
        """
        match = PrefixMatch()
        with self._lock:
            self._lookups += 1
            match.extras = self._extras.get(root, match.extras)
            for node, common in self._tree.walk(root, keys):
                match.runs.append((node.kv, common))
                end = node.start + common
                match.open_intervals.extend(interval for interval in node.intervals if interval[0] < end)
                match.tokens = end
                if node.snapshot is not None and common == len(node.keys):
                    match.snapshots[end] = node.snapshot
        return match

    def record_use(self, reused: int, prefilled: int, shared: int | None = None) -> None:
        """Count the tokens a call reused and prefilled (after the caller capped and aligned the match), and those
        the store held (`shared`, defaults to `reused`): the resume point may fall short of them."""
        with self._lock:
            self._hits += int(reused > 0)
            self._tokens_reused += reused
            self._tokens_shared += reused if shared is None else shared
            self._tokens_prefilled += prefilled

    def insert_keys(
        self,
        root: bytes,
        keys: np.ndarray,
        kv_between: Callable[[int, int], BlockKV],
        intervals: Sequence[Interval] = (),
        snapshots: dict[int, StateSnapshot] | None = None,
        extras: LayerExtras | None = None,
    ) -> int:
        """Store a finished row: the tokens after its longest stored prefix; the stored prefix is only refreshed.

        When the budget cannot hold the whole rest even after evicting every other leaf, as many of its first tokens
        as fit are stored.

        Args:
            root (`bytes`): `root_key(namespace)`.
            keys (`np.ndarray` of int64, shape `(seq_len, fields + 4)`): the token keys of the row's tokens whose KV
                is known (prompt and generated), without padding, as for `match_keys`.
            kv_between (`Callable[[int, int], BlockKV]`):
                KV of positions `[start, end)`, per layer, `(heads, end - start, head_dim)` (copied here).
            intervals (`Sequence[tuple[int, int, bytes]]`): the row's bidirectional blocks (see `interval_digest`).
            snapshots (`dict[int, StateSnapshot]`, *optional*):
                a hybrid decoder's recurrent states after the first `n` tokens, by `n` (kept where those tokens are
                stored; an edge is split to end at `n`).
            extras (`LayerExtras`, *optional*):
                what `kv_between` returns after the layers' K/V (an indexer's keys per token). Every row of a root
                holds the same: a row holding something else is not stored.

        Returns:
            `int`: tokens newly stored.
        """
        extras = extras if extras is not None else LayerExtras()
        with self._lock:
            if root in self._tree.roots and self._extras.get(root, LayerExtras()) != extras:
                return 0
            self._extras[root] = extras
            return self._tree.insert(root, keys, kv_between, intervals, snapshots)

    # -- copies ----------------------------------------------------------------------------------------------------

    def __getstate__(self) -> dict:
        # A copy (`copy.deepcopy`, pickle, `torch.save` of a model holding the store) is an empty store with the same
        # settings and a lock of its own: a lock cannot be pickled, and stored KV is not worth duplicating.
        return {
            "max_bytes": self.max_bytes,
            "block_size": self.block_size,
            "snapshot_tail": self.snapshot_tail,
            "snapshot_every": self.snapshot_every,
        }

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)
