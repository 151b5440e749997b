"""An image-aware KV prefix store across `generate` calls: a radix tree over tokens.

Each stored row (a prompt and its answer) is a path from a root to a node; each edge holds a run of tokens and, for
every decoder layer, the KV of exactly those tokens. Edges split where stored rows diverge, so a lookup returns the
longest shared prefix to the token. A token's key is its key material (`token_key_material`: its id, its token types,
its position ids) plus the content hashes of the images whose placeholders cover it; the root names the model
identity, the cache salt and the key-material layout. Two prompts whose placeholder ids are identical but whose
images, token types or positions differ therefore share nothing from the first differing token on, while what comes
before is shared. Eviction trims or drops least-recently-used leaf edges within a byte budget.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

__all__ = ["PrefixCache", "PrefixCacheStats", "PrefixMatch", "token_key_material"]

# KV of a run of tokens: per decoder layer, `(keys, values)` of shape `(heads, tokens, head_dim)`.
BlockKV = list[tuple[torch.Tensor, torch.Tensor]]
# A bidirectional block of a stored row: `(start, end, digest of its key material and images)`.
Interval = tuple[int, int, bytes]
# One token's key material: its id alone, or its id followed by its per-token inputs.
TokenKey = int | tuple[int, ...]
# Key material of a row: token ids, each token's key material, or `key_material_tensor`'s `(seq_len, fields)`.
RowKeys = Sequence[TokenKey] | torch.Tensor
# Columns a token's key gives to the content hash of the image covering it (sha256: 4 x 64 bits).
_IMAGE_COLUMNS = 4
# Content hashes of the images whose placeholders overlap positions `[start, end)` of a row, in order.
ImagesBetween = Callable[[int, int], Sequence[str]]


def token_key_material(input_ids: torch.Tensor, per_token: dict[str, torch.Tensor]) -> list[tuple[int, ...]]:
    """The key material of each token of one row: its id, then the values of its per-token inputs.

    A block's KV depends on every token up to it through these values (token types set the attention mask, position
    ids the rotary embedding), so they are part of the block keys. Inputs are taken in sorted name order; the caller
    puts the names (`key_material_layout`) in the root key, so two layouts never share a chain.

    Args:
        input_ids (`torch.Tensor` of shape `(seq_len,)`): the row's tokens.
        per_token (`dict[str, torch.Tensor]`):
            per-token inputs of the row, each of shape `(..., seq_len)` (e.g. `(seq_len,)` token types, `(3, seq_len)`
            M-RoPE positions).

    Returns:
        `list[tuple[int, ...]]`: one tuple per token.

    Example:

    ```python
    >>> import torch
    >>> token_key_material(torch.tensor([5, 6]), {"token_type_ids": torch.tensor([1, 0])})
    [(5, 1), (6, 0)]

    ```
    """
    return [tuple(token) for token in key_material_tensor(input_ids, per_token).tolist()]


def key_material_tensor(input_ids: torch.Tensor, per_token: dict[str, torch.Tensor]) -> torch.Tensor:
    """`token_key_material` as a CPU `torch.LongTensor` of shape `(seq_len, fields)` (what the store compares)."""
    length = input_ids.shape[-1]
    if length == 0:
        fields = 1 + sum(math.prod(value.shape[:-1]) for value in per_token.values())
        return torch.zeros(0, fields, dtype=torch.long)
    columns = [input_ids.reshape(1, length).cpu()]
    columns += [per_token[name].reshape(-1, length).cpu() for name in sorted(per_token)]
    return torch.cat([column.long() for column in columns]).T.contiguous()


def key_material_layout(per_token: dict[str, torch.Tensor]) -> tuple[str, ...]:
    """Names and row counts of the per-token inputs `token_key_material` reads, for the root key."""
    return tuple(
        f"{name}:{per_token[name].reshape(-1, per_token[name].shape[-1]).shape[0]}" for name in sorted(per_token)
    )


@dataclass
class PrefixCacheStats:
    """A snapshot of a [`PrefixCache`]'s counters.

    Args:
        lookups (`int`): prompts (batch rows) looked up.
        hits (`int`): lookups that reused at least one token.
        tokens_reused (`int`): prompt tokens restored from the store instead of prefilled.
        tokens_prefilled (`int`): prompt tokens prefilled by calls that used the store.
        bytes (`int`): bytes of stored KV, never more than `max_bytes`.
        tokens (`int`): tokens whose KV is stored (a prefix shared by several rows counts once).
        entries (`int`): stored edges of the tree (runs of tokens stored together).
        evictions (`int`): leaf edges trimmed or dropped to make room.
        max_bytes (`int`): the byte budget.
    """

    lookups: int = 0
    hits: int = 0
    tokens_reused: int = 0
    tokens_prefilled: int = 0
    bytes: int = 0
    tokens: int = 0
    entries: int = 0
    evictions: int = 0
    max_bytes: int = 0


class _Node:
    """An edge of the tree and the node it leads to: a run of token keys and their KV."""

    __slots__ = ("uid", "keys", "kv", "start", "parent", "children", "intervals", "nbytes")

    def __init__(self, uid: int, keys: torch.Tensor, kv: BlockKV, start: int, parent: _Node | None, intervals: tuple):
        self.uid, self.keys, self.kv, self.start, self.parent = uid, keys, kv, start, parent
        self.children: dict = {}  # first token key of the child's edge -> child
        # Bidirectional blocks of the stored row overlapping this edge, as (start, end, digest) in row positions: the
        # stored KV before a resume point is exact only where the new prompt has the very same blocks before it
        # (see `PrefixMatch.open_intervals`).
        self.intervals = intervals
        self.nbytes = _node_bytes(keys, kv)

    @property
    def end(self) -> int:
        return self.start + len(self.keys)


@dataclass
class PrefixMatch:
    """The stored prefix of one prompt row.

    Args:
        tokens (`int`): matched tokens (before any capping by the caller).
        kv (`list[BlockKV]`): the KV of the matched runs of tokens, in order (their lengths add up to `tokens`).
        open_intervals (`list[tuple[int, int, bytes]]`):
            bidirectional blocks (start, end, digest) the matched KV was computed with.
    """

    tokens: int = 0
    kv: list[BlockKV] = field(default_factory=list)
    open_intervals: list[Interval] = field(default_factory=list)

    def layer_kv(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of the first `length` matched tokens for one layer: `(heads, length, head_dim)` each."""
        segments, taken = [], 0
        for run in self.kv:
            if taken >= length:
                break
            segments.append(run[layer])
            taken += run[layer][0].shape[1]
        if len(segments) == 1:
            return segments[0][0][:, :length], segments[0][1][:, :length]
        keys = torch.cat([keys for keys, _ in segments], dim=1)[:, :length]
        values = torch.cat([values for _, values in segments], dim=1)[:, :length]
        return keys, values


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

    Example:

    ```python
    >>> from vlmprep import PrefixCache
    >>> store = PrefixCache(max_bytes=64 * 2**20)
    >>> store.stats.entries
    0

    ```
    """

    def __init__(self, max_bytes: int = 2**30, block_size: int | None = None):
        for name, value, least in (("max_bytes", max_bytes, 0), ("block_size", block_size, 1)):
            if name == "block_size" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"`{name}` must be an int, got {value!r} ({type(value).__name__}). Pass e.g. `{name}=16`."
                )
            if value < least:
                raise ValueError(f"`{name}` must be at least {least}, got {value}.")
        self.block_size = block_size  # no effect: kept only so code passing it (and copies) keep working
        self._max_bytes = max_bytes
        self._roots: dict[bytes, _Node] = {}
        self._recency: OrderedDict[int, _Node] = OrderedDict()  # every non-root node, least recently used first
        self._uids = itertools.count()
        self._lock = threading.Lock()
        self._stats = PrefixCacheStats(max_bytes=self._max_bytes)

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def stats(self) -> PrefixCacheStats:
        """A snapshot of the counters."""
        with self._lock:
            return PrefixCacheStats(**vars(self._stats))

    def clear(self) -> None:
        """Drop every stored entry (counters of past lookups are kept)."""
        with self._lock:
            self._roots.clear()
            self._recency.clear()
            self._stats.bytes = self._stats.entries = self._stats.tokens = 0

    def __len__(self) -> int:
        return len(self._recency)

    # -- keys ------------------------------------------------------------------------------------------------------

    @staticmethod
    def root_key(namespace: Sequence[str]) -> bytes:
        """The key every path starts from: the model identity and the cache salt."""
        return hashlib.sha256("\x1f".join(map(str, namespace)).encode()).digest()

    @staticmethod
    def interval_digest(tokens: RowKeys, image_hashes: Sequence[str]) -> bytes:
        """The identity of a bidirectional block: its tokens' key material and images (what its KV saw after it)."""
        hasher = hashlib.sha256(b"bidirectional")
        if isinstance(tokens, torch.Tensor):
            hasher.update(b"K" + str(tuple(tokens.shape)).encode() + tokens.long().contiguous().numpy().tobytes())
        else:
            hasher.update(b"T" + repr(list(tokens)).encode())
        hasher.update(b"I" + ",".join(image_hashes).encode())
        return hasher.digest()

    @staticmethod
    def token_keys(tokens: RowKeys, images_between: ImagesBetween) -> torch.Tensor:
        """Each token's key: its key material, followed by the content hash of the images covering it (zeros if none).

        Args:
            tokens (`Sequence[int | tuple[int, ...]]` or `torch.Tensor`):
                token ids, or each token's key material (`token_key_material`, `key_material_tensor`).
            images_between (`Callable[[int, int], Sequence[str]]`):
                content hashes of the images whose placeholders overlap positions `[start, end)`, in order.

        Returns:
            `torch.LongTensor` of shape `(seq_len, fields + 4)`: one row per token.
        """
        material = tokens if isinstance(tokens, torch.Tensor) else torch.tensor(list(tokens), dtype=torch.long)
        material = material.reshape(len(material), -1 if len(material) else 1).long()
        images = torch.zeros(len(material), _IMAGE_COLUMNS, dtype=torch.long)
        for (start, end), hashes in _image_runs(len(material), images_between).items():
            digest = hashlib.sha256("\x1f".join(hashes).encode()).digest()
            images[start:end] = torch.frombuffer(bytearray(digest), dtype=torch.int64)
        return torch.cat([material, images], dim=1)

    # -- lookup and insert -----------------------------------------------------------------------------------------

    def match(self, root: bytes, tokens: RowKeys, images_between: ImagesBetween) -> PrefixMatch:
        """The longest stored prefix of `tokens`, to the token.

        Args:
            root (`bytes`): `root_key(namespace)`.
            tokens (`Sequence[int | tuple[int, ...]]` or `torch.Tensor`):
                the row's prompt without padding: token ids, or each token's key material (`token_key_material`,
                `key_material_tensor`).
            images_between (`Callable[[int, int], Sequence[str]]`):
                content hashes of the images whose placeholders overlap positions `[start, end)`, in order.

        Returns:
            `PrefixMatch`
        """
        keys = self.token_keys(tokens, images_between)
        match = PrefixMatch()
        with self._lock:
            self._stats.lookups += 1
            for node, common in self._walk(self._roots.get(root), keys):
                self._recency.move_to_end(node.uid)
                match.kv.append([(k[:, :common], v[:, :common]) for k, v in node.kv])
                end = node.start + common
                match.open_intervals.extend(interval for interval in node.intervals if interval[0] < end)
                match.tokens = end
        return match

    def record_use(self, reused: int, prefilled: int) -> None:
        """Count the tokens a call reused and prefilled (after the caller capped and aligned the match)."""
        with self._lock:
            self._stats.hits += int(reused > 0)
            self._stats.tokens_reused += reused
            self._stats.tokens_prefilled += prefilled

    def insert(
        self,
        root: bytes,
        tokens: RowKeys,
        images_between: ImagesBetween,
        kv_between: Callable[[int, int], BlockKV],
        intervals: Sequence[Interval] = (),
    ) -> int:
        """Store a finished row: the tokens after its longest stored prefix; the stored prefix is only refreshed.

        When the budget cannot hold the whole rest even after evicting every other leaf, as many of its first tokens
        as fit are stored.

        Args:
            root (`bytes`): `root_key(namespace)`.
            tokens (`Sequence[int | tuple[int, ...]]` or `torch.Tensor`):
                the row's tokens whose KV is known (prompt and generated), without padding, as for `match`.
            images_between (`Callable[[int, int], Sequence[str]]`): as for `match`.
            kv_between (`Callable[[int, int], BlockKV]`):
                KV of positions `[start, end)`, per layer, `(heads, end - start, head_dim)` (copied here).
            intervals (`Sequence[tuple[int, int, bytes]]`): the row's bidirectional blocks (see `interval_digest`).

        Returns:
            `int`: tokens newly stored.
        """
        keys = self.token_keys(tokens, images_between)
        if len(keys) == 0:
            return 0
        with self._lock:
            parent = self._roots.get(root)
            if parent is None:
                parent = self._roots[root] = _Node(-1, keys[:0], [], 0, None, ())
            path = self._walk(parent, keys)
            for node, _ in path:
                self._recency.move_to_end(node.uid)
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
                if not self._roots[root].children:
                    del self._roots[root]
                return 0
            kv = [(k[:, :take].detach().clone(), v[:, :take].detach().clone()) for k, v in kv]
            end = start + take
            overlapping = tuple(interval for interval in intervals if interval[0] < end and interval[1] > start)
            self._attach(_Node(next(self._uids), keys[start:end].clone(), kv, start, parent, overlapping))
            return take

    # -- the tree (every method below runs under the lock) ---------------------------------------------------------

    @staticmethod
    def _walk(root: _Node | None, keys: torch.Tensor) -> list[tuple[_Node, int]]:
        """The nodes along the longest stored prefix of `keys`, each with how many of its edge's tokens match."""
        path, position, node = [], 0, root
        total, width = keys.shape
        while node is not None and position < total:
            child = node.children.get(tuple(keys[position].tolist()))
            if child is None or child.keys.shape[1] != width:
                break
            edge = child.keys.shape[0]
            length = min(edge, total - position)
            differs = (child.keys[:length] != keys[position : position + length]).any(dim=1)
            common = int(differs.int().argmax()) if bool(differs.any()) else length
            path.append((child, common))
            position += common
            node = child if common == edge else None
        return path

    def _attach(self, node: _Node) -> None:
        node.parent.children[_first(node)] = node
        self._recency[node.uid] = node
        self._stats.bytes += node.nbytes
        self._stats.tokens += len(node.keys)
        self._stats.entries += 1

    def _split(self, node: _Node, length: int) -> _Node:
        """Cut `node`'s edge after `length` tokens; returns the new upper node (the lower half keeps `node`)."""
        middle = node.start + length
        upper_kv = [(k[:, :length].clone(), v[:, :length].clone()) for k, v in node.kv]
        upper_intervals = tuple(i for i in node.intervals if i[0] < middle)
        upper = _Node(next(self._uids), node.keys[:length].clone(), upper_kv, node.start, node.parent, upper_intervals)
        node.parent.children[_first(upper)] = upper
        # Copies, not views: the halves may be evicted apart, and a view would keep the whole edge's memory alive
        self._replace_tail(node, length)
        node.start, node.parent, node.intervals = middle, upper, tuple(i for i in node.intervals if i[1] > middle)
        upper.children[_first(node)] = node
        self._recency[upper.uid] = upper
        self._recency.move_to_end(node.uid)
        self._stats.bytes += upper.nbytes
        self._stats.tokens += len(upper.keys)
        self._stats.entries += 1
        return upper

    def _replace_tail(self, node: _Node, dropped: int) -> None:
        """Keep only the tokens of `node`'s edge after its first `dropped` ones (new tensors, old ones freed)."""
        before, count = node.nbytes, len(node.keys)
        node.keys = node.keys[dropped:].clone()
        node.kv = [(k[:, dropped:].clone(), v[:, dropped:].clone()) for k, v in node.kv]
        node.nbytes = _node_bytes(node.keys, node.kv)
        self._stats.bytes -= before - node.nbytes
        self._stats.tokens -= count - len(node.keys)

    def _make_room(self, nbytes: int, protect: set[int]) -> int:
        """Evict least-recently-used leaves (the tail of an edge, or all of it) until `nbytes` fit; returns the room."""
        while self._stats.bytes + nbytes > self._max_bytes:
            # Only leaves are evicted, so every stored edge keeps its whole path to the root.
            victim = next(
                (node for uid, node in self._recency.items() if not node.children and uid not in protect), None
            )
            if victim is None:
                break
            self._stats.evictions += 1
            per_token = victim.nbytes // len(victim.keys)
            excess = self._stats.bytes + nbytes - self._max_bytes
            trimmed = -(-excess // per_token) if per_token else len(victim.keys)
            if trimmed < len(victim.keys):
                before, count = victim.nbytes, len(victim.keys)
                victim.keys = victim.keys[:-trimmed].clone()
                victim.kv = [(k[:, :-trimmed].clone(), v[:, :-trimmed].clone()) for k, v in victim.kv]
                victim.nbytes = _node_bytes(victim.keys, victim.kv)
                self._stats.bytes -= before - victim.nbytes
                self._stats.tokens -= count - len(victim.keys)
                continue
            self._remove_leaf(victim)
        return max(0, self._max_bytes - self._stats.bytes)

    def _remove_leaf(self, node: _Node) -> None:
        del node.parent.children[_first(node)]
        del self._recency[node.uid]
        self._stats.bytes -= node.nbytes
        self._stats.tokens -= len(node.keys)
        self._stats.entries -= 1
        if node.parent.parent is None and not node.parent.children:
            self._roots = {key: root for key, root in self._roots.items() if root is not node.parent}

    # -- copies ----------------------------------------------------------------------------------------------------

    def __getstate__(self) -> dict:
        # A copy (`copy.deepcopy`, pickle, `torch.save` of a model holding the store) is an empty store with the same
        # settings and a lock of its own: a lock cannot be pickled, and stored KV is not worth duplicating.
        return {"max_bytes": self.max_bytes, "block_size": self.block_size}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)


def _kv_bytes(kv: BlockKV) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


def _node_bytes(keys: torch.Tensor, kv: BlockKV) -> int:
    # The token keys are stored with the KV and count against the budget too
    return keys.numel() * keys.element_size() + _kv_bytes(kv)


def _first(node: _Node) -> tuple[int, ...]:
    """The key of the first token of `node`'s edge: how its parent finds it."""
    return tuple(node.keys[0].tolist())


def _image_runs(length: int, images_between: ImagesBetween) -> dict[tuple[int, int], tuple[str, ...]]:
    """Runs of positions covered by the same image placeholders, with the content hashes covering them.

    Bisects `[0, length)`: a range with no image is skipped whole, and a range whose one image covers both its ends
    lies inside that image's (contiguous) span, so the callable runs a few times per image rather than per token.
    """
    runs: dict[tuple[int, int], tuple[str, ...]] = {}
    pending = [(0, length)] if length else []
    while pending:
        low, high = pending.pop()
        found = tuple(images_between(low, high))
        if not found:
            continue
        if high - low == 1 or (
            len(found) == 1 and tuple(images_between(low, low + 1)) == found == tuple(images_between(high - 1, high))
        ):
            runs[(low, high)] = found
            continue
        middle = (low + high) // 2
        pending += [(low, middle), (middle, high)]
    return runs
