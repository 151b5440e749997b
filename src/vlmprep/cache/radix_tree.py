"""The radix tree behind `PrefixCache`: runs of token keys on edges, each edge holding the KV of its tokens.

Each stored row is a path from a root (model identity, cache salt, key layout) to a node. Edges split where stored rows
diverge, so a walk finds the longest stored prefix to the token. Eviction trims or drops least-recently-used leaf
edges, so every stored edge keeps its whole path to the root. A node of a hybrid decoder's row may also hold a snapshot of
every recurrent layer's state at the token its edge ends at (`StateSnapshot`): its bytes count in the budget, it goes
with its node when evicted, and trimming an edge's tail drops it (it no longer ends there). The tree is not
thread-safe: its owner holds a lock around every call.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
import torch

from .recurrent_state import StateSnapshot

__all__ = ["BlockKV", "Interval", "RadixNode", "RadixTree"]

# KV of a run of tokens: per decoder layer, `(keys, values)` of shape `(heads, tokens, head_dim)`.
BlockKV = list[tuple[torch.Tensor, torch.Tensor]]
# A bidirectional block of a stored row: `(start, end, digest of its key material and images)`.
Interval = tuple[int, int, bytes]


class RadixNode:
    """An edge of the tree and the node it leads to: a run of token keys and their KV.

    Args:
        uid (`int`): the node's id in the recency order (`-1` for a root).
        keys (`np.ndarray` of shape `(tokens, fields)`): the edge's token keys.
        kv (`BlockKV`): the edge's KV, per layer.
        start (`int`): position of the edge's first token in its rows.
        parent (`RadixNode`, *optional*): the node the edge leaves from (`None` for a root).
        intervals (`tuple[Interval, ...]`):
            bidirectional blocks of the stored row overlapping this edge, in row positions: the stored KV before a
            resume point is exact only where the new prompt has the very same blocks before it.
    """

    __slots__ = ("uid", "keys", "kv", "start", "parent", "children", "intervals", "nbytes", "snapshot")

    def __init__(
        self, uid: int, keys: np.ndarray, kv: BlockKV, start: int, parent: RadixNode | None, intervals: tuple
    ):
        self.uid, self.keys, self.kv, self.start, self.parent = uid, keys, kv, start, parent
        self.children: dict[bytes, RadixNode] = {}  # first token key of the child's edge -> child
        self.intervals = intervals
        self.snapshot: StateSnapshot | None = None  # recurrent layers' states after the edge's last token
        self.nbytes = _node_bytes(keys, kv)

    @property
    def end(self) -> int:
        return self.start + len(self.keys)

    @property
    def first(self) -> bytes:
        """The key of the edge's first token: how its parent finds it."""
        return self.keys[0].tobytes()


class RadixTree:
    """Token-granular prefix tree with byte accounting and LRU eviction of leaves.

    Args:
        max_bytes (`int`): budget for the stored KV and token keys.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.roots: dict[bytes, RadixNode] = {}
        self.recency: OrderedDict[int, RadixNode] = OrderedDict()  # every non-root node, least recently used first
        self.uids = itertools.count()
        self.bytes = self.tokens = self.entries = self.evictions = 0
        self.snapshot_bytes = self.snapshots = 0  # of the recurrent-state snapshots (part of `bytes`)

    def __len__(self) -> int:
        return len(self.recency)

    def clear(self) -> None:
        self.roots.clear()
        self.recency.clear()
        self.bytes = self.tokens = self.entries = self.snapshot_bytes = self.snapshots = 0

    def walk(self, root: bytes, keys: np.ndarray) -> list[tuple[RadixNode, int]]:
        """The nodes along the longest stored prefix of `keys` (each marked recently used), each with how many of its
        edge's tokens match."""
        path, position, node = [], 0, self.roots.get(root)
        total = len(keys)
        while node is not None and position < total:
            child = node.children.get(keys[position].tobytes())  # a key of another width is another byte string
            if child is None:
                break
            edge = len(child.keys)
            length = min(edge, total - position)
            stored, asked = child.keys[:length], keys[position : position + length]
            # The first differing field, flat: `any(axis=1)` over a few columns costs several times this
            differs = (stored != asked).reshape(-1)  # (length * fields,)
            first = int(differs.argmax())
            common = first // stored.shape[1] if differs[first] else length  # tokens before the first difference
            self.recency.move_to_end(child.uid)
            path.append((child, common))
            position += common
            node = child if common == edge else None
        return path

    def insert(
        self,
        root: bytes,
        keys: np.ndarray,
        kv_between: Callable[[int, int], BlockKV],
        intervals: Sequence[Interval],
        snapshots: dict[int, StateSnapshot] | None = None,
    ) -> int:
        """Store the tokens of `keys` after their longest stored prefix (as many as fit), then the snapshots (token
        count -> states there) at stored positions, an edge split where one falls inside it; returns tokens stored."""
        stored = self._insert_tokens(root, keys, kv_between, intervals)
        if snapshots:
            # The row's own edges are never evicted for its snapshots; the deepest (where a next turn goes on) first
            row = {node.uid for node, _ in self.walk(root, keys)}
            for position, snapshot in sorted(snapshots.items(), reverse=True):
                self._place_snapshot(root, keys[:position], snapshot, row)
        return stored

    def _place_snapshot(self, root: bytes, keys: np.ndarray, snapshot: StateSnapshot, row: set[int]) -> None:
        path = self.walk(root, keys)
        if len(keys) == 0 or sum(common for _, common in path) < len(keys):
            return  # not stored (the budget held fewer tokens)
        node, common = path[-1]
        if node.snapshot is not None and common == len(node.keys):
            return
        protect, ancestor = set(row), node
        while ancestor is not None:
            protect.add(ancestor.uid)
            ancestor = ancestor.parent
        if self._make_room(snapshot.nbytes, protect) < snapshot.nbytes:
            return
        if common < len(node.keys):
            node = self._split(node, common)
        node.snapshot = snapshot
        node.nbytes += snapshot.nbytes
        self.bytes += snapshot.nbytes
        self.snapshot_bytes += snapshot.nbytes
        self.snapshots += 1

    def _insert_tokens(
        self, root: bytes, keys: np.ndarray, kv_between: Callable[[int, int], BlockKV], intervals: Sequence[Interval]
    ) -> int:
        if len(keys) == 0:
            return 0
        parent = self.roots.get(root)
        if parent is None:
            parent = self.roots[root] = RadixNode(-1, keys[:0], [], 0, None, ())
        path = self.walk(root, keys)
        if sum(common for _, common in path) == len(keys):
            return 0  # stored already, maybe as the start of a longer row: nothing to split
        if path:
            parent, common = path[-1]
            if common < len(parent.keys):
                parent = self._split(parent, common)
        start = parent.end
        kv = kv_between(start, len(keys))
        per_token = _node_bytes(keys[start:], kv) // (len(keys) - start)
        protect, ancestor = set(), parent
        while ancestor is not None:  # the new edge's path to the root must stay
            protect.add(ancestor.uid)
            ancestor = ancestor.parent
        room = self._make_room(per_token * (len(keys) - start), protect)
        take = min(len(keys) - start, room // per_token if per_token else len(keys) - start)
        if take == 0:
            if not self.roots[root].children:
                del self.roots[root]
            return 0
        kv = [(k[:, :take].detach().clone(), v[:, :take].detach().clone()) for k, v in kv]
        end = start + take
        overlapping = tuple(interval for interval in intervals if interval[0] < end and interval[1] > start)
        self._attach(RadixNode(next(self.uids), keys[start:end].copy(), kv, start, parent, overlapping))
        return take

    def _attach(self, node: RadixNode) -> None:
        node.parent.children[node.first] = node
        self.recency[node.uid] = node
        self.bytes += node.nbytes
        self.tokens += len(node.keys)
        self.entries += 1

    def _split(self, node: RadixNode, length: int) -> RadixNode:
        """Cut `node`'s edge after `length` tokens; returns the new upper node (the lower half keeps `node`)."""
        middle = node.start + length
        upper_kv = [(k[:, :length].clone(), v[:, :length].clone()) for k, v in node.kv]
        upper_intervals = tuple(i for i in node.intervals if i[0] < middle)
        upper = RadixNode(
            next(self.uids), node.keys[:length].copy(), upper_kv, node.start, node.parent, upper_intervals
        )
        node.parent.children[upper.first] = upper
        # Copies, not views: the halves may be evicted apart, and a view would keep the whole edge's memory alive
        self._resize(node, slice(length, None), keeps_end=True)
        node.start, node.parent, node.intervals = middle, upper, tuple(i for i in node.intervals if i[1] > middle)
        upper.children[node.first] = node
        self.recency[upper.uid] = upper
        self.recency.move_to_end(node.uid)
        self.bytes += upper.nbytes
        self.tokens += len(upper.keys)
        self.entries += 1
        return upper

    def _resize(self, node: RadixNode, kept: slice, keeps_end: bool = False) -> None:
        """Keep only the `kept` tokens of `node`'s edge (new tensors: the old ones are freed, not kept by views); its
        snapshot stays only while the edge still ends where it did."""
        before, count = node.nbytes, len(node.keys)
        node.keys = node.keys[kept].copy()
        node.kv = [(k[:, kept].clone(), v[:, kept].clone()) for k, v in node.kv]
        if not keeps_end and node.snapshot is not None:
            self.snapshot_bytes -= node.snapshot.nbytes
            self.snapshots -= 1
            node.snapshot = None
        node.nbytes = _node_bytes(node.keys, node.kv) + (node.snapshot.nbytes if node.snapshot is not None else 0)
        self.bytes -= before - node.nbytes
        self.tokens -= count - len(node.keys)

    def _make_room(self, nbytes: int, protect: set[int]) -> int:
        """Evict least-recently-used leaves (the tail of an edge, or all of it) until `nbytes` fit; returns the room."""
        while self.bytes + nbytes > self.max_bytes:
            # Only leaves are evicted, so every stored edge keeps its whole path to the root.
            victim = next(
                (node for uid, node in self.recency.items() if not node.children and uid not in protect), None
            )
            if victim is None:
                break
            self.evictions += 1
            per_token = victim.nbytes // len(victim.keys)
            excess = self.bytes + nbytes - self.max_bytes
            trimmed = -(-excess // per_token) if per_token else len(victim.keys)
            if trimmed < len(victim.keys):
                self._resize(victim, slice(None, -trimmed))
                continue
            self._remove_leaf(victim)
        return max(0, self.max_bytes - self.bytes)

    def _remove_leaf(self, node: RadixNode) -> None:
        del node.parent.children[node.first]
        del self.recency[node.uid]
        self.bytes -= node.nbytes
        self.tokens -= len(node.keys)
        self.entries -= 1
        if node.snapshot is not None:
            self.snapshot_bytes -= node.snapshot.nbytes
            self.snapshots -= 1
        if node.parent.parent is None and not node.parent.children:
            self.roots = {key: root for key, root in self.roots.items() if root is not node.parent}


def _node_bytes(keys: np.ndarray, kv: BlockKV) -> int:
    # The token keys are stored with the KV and count against the budget too
    return keys.nbytes + sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
