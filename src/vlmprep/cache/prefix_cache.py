"""An image-aware KV prefix store across `generate` calls.

A prompt is cut into fixed-size blocks of tokens. Each stored block holds the KV of its tokens for every decoder layer
and is keyed by a hash chained from its parent: `hash(parent key, block key material, content hashes of the images
whose placeholders overlap the block)`. A token's key material (`token_key_material`) is everything of that token that
its KV depends on besides the images: its id, its token types (attention mask of bidirectional families, modality of
multimodal positions) and its position ids (multimodal rope). Two prompts whose placeholder ids are identical but whose
images, token types or positions differ therefore share nothing from the first difference on, while what comes before
is shared. Blocks form a tree (shared prefixes are stored once); eviction removes least-recently-used leaves within a
byte budget.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

__all__ = ["PrefixCache", "PrefixCacheStats", "PrefixMatch", "token_key_material"]

# KV of one block: per decoder layer, `(keys, values)` of shape `(heads, block_tokens, head_dim)`.
BlockKV = list[tuple[torch.Tensor, torch.Tensor]]
# A bidirectional block of a stored row: `(start, end, digest of its key material and images)`.
Interval = tuple[int, int, bytes]
# One token's key material: its id alone, or its id followed by its per-token inputs.
TokenKey = int | tuple[int, ...]


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
    length = input_ids.shape[-1]
    if length == 0:
        return []
    columns = [input_ids.reshape(1, length)]
    columns += [per_token[name].reshape(-1, length).to(input_ids.device) for name in sorted(per_token)]
    return [tuple(token) for token in torch.cat(columns).long().T.tolist()]  # (seq_len, fields)


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
        entries (`int`): stored blocks.
        evictions (`int`): blocks dropped to make room.
        max_bytes (`int`): the byte budget.
    """

    lookups: int = 0
    hits: int = 0
    tokens_reused: int = 0
    tokens_prefilled: int = 0
    bytes: int = 0
    entries: int = 0
    evictions: int = 0
    max_bytes: int = 0


@dataclass
class _Block:
    key: bytes
    parent: bytes
    kv: BlockKV
    nbytes: int
    # Bidirectional blocks of the stored row overlapping this block, as (start, end, digest) in row positions: the
    # stored KV before a resume point is exact only where the new prompt has the very same blocks before it
    # (see `PrefixMatch.open_intervals`).
    intervals: tuple[Interval, ...]
    children: int = 0


@dataclass
class PrefixMatch:
    """The stored prefix of one prompt row.

    Args:
        tokens (`int`): matched tokens (a multiple of the block size, before any capping by the caller).
        kv (`list[BlockKV]`): the matched blocks' KV, in order.
        open_intervals (`list[tuple[int, int, bytes]]`):
            bidirectional blocks (start, end, digest) the matched blocks' KV was computed with.
    """

    tokens: int = 0
    kv: list[BlockKV] = field(default_factory=list)
    open_intervals: list[Interval] = field(default_factory=list)

    def layer_kv(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of the first `length` matched tokens for one layer: `(heads, length, head_dim)` each."""
        keys = torch.cat([block[layer][0] for block in self.kv], dim=1)[:, :length]
        values = torch.cat([block[layer][1] for block in self.kv], dim=1)[:, :length]
        return keys, values


class PrefixCache:
    """Stores the KV of finished prompts (and their answers) so later prompts that start the same way skip them.

    Opt-in: pass `prefix_cache=` to `generate`, or set `model.prefix_cache`. One store may serve several models and
    threads; entries of different models (or cache salts) never mix.

    Args:
        max_bytes (`int`, *optional*, defaults to 1 GiB): budget for the stored KV.
        block_size (`int`, *optional*, defaults to 16): tokens per block, the granularity of sharing.

    Example:

    ```python
    >>> from vlmprep import PrefixCache
    >>> store = PrefixCache(max_bytes=64 * 2**20, block_size=16)
    >>> store.stats.entries
    0

    ```
    """

    def __init__(self, max_bytes: int = 2**30, block_size: int = 16):
        for name, value, least in (("max_bytes", max_bytes, 0), ("block_size", block_size, 1)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"`{name}` must be an int, got {value!r} ({type(value).__name__}). Pass e.g. `{name}=16`."
                )
            if value < least:
                raise ValueError(f"`{name}` must be at least {least}, got {value}.")
        self.block_size = block_size
        self._max_bytes = max_bytes
        self._blocks: OrderedDict[bytes, _Block] = OrderedDict()  # least recently used first
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
        """Drop every stored block (counters of past lookups are kept)."""
        with self._lock:
            self._blocks.clear()
            self._stats.bytes = self._stats.entries = 0

    def __len__(self) -> int:
        return len(self._blocks)

    # -- keys ------------------------------------------------------------------------------------------------------

    @staticmethod
    def root_key(namespace: Sequence[str]) -> bytes:
        """The key every chain starts from: the model identity and the cache salt."""
        return hashlib.sha256("\x1f".join(map(str, namespace)).encode()).digest()

    @staticmethod
    def block_key(parent: bytes, tokens: Sequence[TokenKey], image_hashes: Sequence[str]) -> bytes:
        """`hash(parent, tokens' key material, image hashes)`: a block's identity includes everything before it."""
        hasher = hashlib.sha256(parent)
        hasher.update(b"T" + repr(list(tokens)).encode())
        hasher.update(b"I" + ",".join(image_hashes).encode())
        return hasher.digest()

    @staticmethod
    def interval_digest(tokens: Sequence[TokenKey], image_hashes: Sequence[str]) -> bytes:
        """The identity of a bidirectional block: its tokens' key material and images (what its KV saw after it)."""
        return PrefixCache.block_key(b"bidirectional", tokens, image_hashes)

    def _chain(
        self, root: bytes, tokens: Sequence[TokenKey], images_between: Callable[[int, int], Sequence[str]], blocks: int
    ) -> list[bytes]:
        keys, parent = [], root
        for index in range(blocks):
            start, end = index * self.block_size, (index + 1) * self.block_size
            parent = self.block_key(parent, tokens[start:end], images_between(start, end))
            keys.append(parent)
        return keys

    # -- lookup and insert -----------------------------------------------------------------------------------------

    def match(
        self, root: bytes, tokens: Sequence[TokenKey], images_between: Callable[[int, int], Sequence[str]]
    ) -> PrefixMatch:
        """The longest stored prefix of `tokens`, in whole blocks.

        Args:
            root (`bytes`): `root_key(namespace)`.
            tokens (`Sequence[int | tuple[int, ...]]`):
                the row's prompt without padding: token ids, or each token's key material (`token_key_material`).
            images_between (`Callable[[int, int], Sequence[str]]`):
                content hashes of the images whose placeholders overlap positions `[start, end)`, in order.

        Returns:
            `PrefixMatch`
        """
        keys = self._chain(root, tokens, images_between, len(tokens) // self.block_size)
        match = PrefixMatch()
        with self._lock:
            self._stats.lookups += 1
            for key in keys:
                block = self._blocks.get(key)
                if block is None:
                    break
                self._blocks.move_to_end(key)
                match.kv.append(block.kv)
                match.open_intervals.extend(block.intervals)
                match.tokens += self.block_size
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
        tokens: Sequence[TokenKey],
        images_between: Callable[[int, int], Sequence[str]],
        block_kv: Callable[[int, int], BlockKV],
        intervals: Sequence[Interval] = (),
    ) -> int:
        """Store the whole blocks of a finished row; blocks already stored are only refreshed.

        Args:
            root (`bytes`): `root_key(namespace)`.
            tokens (`Sequence[int | tuple[int, ...]]`):
                the row's tokens whose KV is known (prompt and generated), without padding, as for `match`.
            images_between (`Callable[[int, int], Sequence[str]]`): as for `match`.
            block_kv (`Callable[[int, int], BlockKV]`): KV of positions `[start, end)`, per layer.
            intervals (`Sequence[tuple[int, int, bytes]]`): the row's bidirectional blocks (see `interval_digest`).

        Returns:
            `int`: blocks newly stored.
        """
        keys = self._chain(root, tokens, images_between, len(tokens) // self.block_size)
        stored, parent = 0, root
        with self._lock:
            for index, key in enumerate(keys):
                if key in self._blocks:
                    self._blocks.move_to_end(key)
                    parent = key
                    continue
                start, end = index * self.block_size, (index + 1) * self.block_size
                kv = [(k.detach().clone(), v.detach().clone()) for k, v in block_kv(start, end)]
                nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
                if not self._make_room(nbytes, protect=set(keys[:index])):
                    break
                overlapping = tuple(interval for interval in intervals if interval[0] < end and interval[1] > start)
                self._blocks[key] = _Block(key, parent, kv, nbytes, overlapping)
                if parent in self._blocks:
                    self._blocks[parent].children += 1
                self._stats.bytes += nbytes
                self._stats.entries += 1
                stored += 1
                parent = key
        return stored

    def _make_room(self, nbytes: int, protect: set[bytes]) -> bool:
        if nbytes > self._max_bytes:
            return False
        while self._stats.bytes + nbytes > self._max_bytes:
            # Only leaves are evicted, least recently used first, so every stored block keeps its whole chain.
            victim = next((k for k, b in self._blocks.items() if b.children == 0 and k not in protect), None)
            if victim is None:
                return False
            block = self._blocks.pop(victim)
            if block.parent in self._blocks:
                self._blocks[block.parent].children -= 1
            self._stats.bytes -= block.nbytes
            self._stats.entries -= 1
            self._stats.evictions += 1
        return True

    # -- copies ----------------------------------------------------------------------------------------------------

    def __getstate__(self) -> dict:
        # A copy (`copy.deepcopy`, pickle, `torch.save` of a model holding the store) is an empty store with the same
        # settings and a lock of its own: a lock cannot be pickled, and stored KV is not worth duplicating.
        return {"max_bytes": self.max_bytes, "block_size": self.block_size}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)
