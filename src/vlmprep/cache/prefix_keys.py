"""Keys of the prefix store: what a token's KV depends on, as one row of int64 per token.

A token's key is its key material (its id, then the values of its per-token inputs: token types, position ids) followed
by the content hash of the images whose placeholders cover it. Keys are numpy arrays: the store compares runs of them
on every lookup, and a numpy operation costs a fraction of a torch one at these sizes (a lookup's cost is mostly fixed
per-operation overhead, see docs/benchmarks.md).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

__all__ = ["interval_digest", "key_material_array", "key_material_layout"]

# One token's key material: its id alone, or its id followed by its per-token inputs.
TokenKey = int | tuple[int, ...]
# Key material of a row: token ids, each token's key material, or a `(seq_len, fields)` tensor or array.
RowKeys = Sequence[TokenKey] | torch.Tensor | np.ndarray
# Content hashes of the images whose placeholders overlap positions `[start, end)` of a row, in order.
ItemsBetween = Callable[[int, int], Sequence[str]]
# Columns a token's key gives to the content hash of the image covering it (sha256: 4 x 64 bits).
ITEM_COLUMNS = 4


def key_material_array(
    input_ids: torch.Tensor | np.ndarray, per_token: dict, items_between: ItemsBetween | None = None
) -> np.ndarray:
    """Each token's key material (its id, then the values of its per-token inputs), and with `items_between` its
    whole key: followed by the content hash of the images whose placeholders cover it (zeros where none does).

    A token's KV depends on every token up to it through these values (token types set the attention mask, position
    ids the rotary embedding), so they are part of its key. Inputs are taken in sorted name order; the caller puts the
    names (`key_material_layout`) in the root key, so two layouts never share a path. The keys with images are what
    `PrefixCache.match_keys` and `PrefixCache.insert_keys` take.

    Args:
        input_ids (`torch.Tensor` or `np.ndarray` of shape `(seq_len,)`): the row's tokens.
        per_token (`dict[str, torch.Tensor | np.ndarray]`):
            per-token inputs of the row, each of shape `(..., seq_len)` (e.g. `(seq_len,)` token types, `(3, seq_len)`
            M-RoPE positions).
        items_between (`Callable[[int, int], Sequence[str]]`, *optional*):
            content hashes of the images whose placeholders overlap positions `[start, end)`, in order; when given,
            the 4 image columns are added.

    Returns:
        `np.ndarray` of int64, shape `(seq_len, 1 + fields of the inputs)`, plus 4 columns with `items_between`.

    Example:

    ```python
    >>> import torch
    >>> key_material_array(torch.tensor([5, 6]), {"token_type_ids": torch.tensor([1, 0])}).tolist()
    [[5, 1], [6, 0]]
    >>> key_material_array(torch.tensor([5, 6]), {}, items_between=lambda start, end: []).tolist()
    [[5, 0, 0, 0, 0], [6, 0, 0, 0, 0]]

    ```
    """
    ids = _as_array(input_ids)
    length = ids.shape[-1]
    inputs = [_as_array(per_token[name]) for name in sorted(per_token)]
    inputs = [value.reshape(math.prod(value.shape[:-1]), length) for value in inputs]  # (rows, seq_len) each
    extra = ITEM_COLUMNS if items_between is not None else 0
    material = np.empty((length, 1 + sum(value.shape[0] for value in inputs) + extra), dtype=np.int64)
    material[:, 0] = ids.reshape(length)
    column = 1
    for value in inputs:  # `rows` columns each
        material[:, column : column + value.shape[0]] = value.T
        column += value.shape[0]
    if items_between is not None:
        _fill_item_columns(material, items_between)
    return material


def key_material_layout(per_token: dict) -> tuple[str, ...]:
    """Names and row counts of the per-token inputs `key_material_array` reads, for the root key."""
    return tuple(f"{name}:{math.prod(per_token[name].shape[:-1])}" for name in sorted(per_token))


def _fill_item_columns(keys: np.ndarray, items_between: ItemsBetween) -> None:
    """Write the last `ITEM_COLUMNS` columns of `keys`: the digest of the images covering each token, else zeros."""
    keys[:, -ITEM_COLUMNS:] = 0
    for (start, end), hashes in _item_runs(len(keys), items_between).items():
        digest = hashlib.sha256("\x1f".join(hashes).encode()).digest()
        keys[start:end, -ITEM_COLUMNS:] = np.frombuffer(digest, dtype=np.int64)


def interval_digest(tokens: RowKeys, item_hashes: Sequence[str]) -> bytes:
    """The identity of a bidirectional block: its tokens' key material and images (what its KV saw after it).

    Args:
        tokens (`Sequence[int | tuple[int, ...]]`, `torch.Tensor` or `np.ndarray`): the block's key material.
        item_hashes (`Sequence[str]`): content hashes of the images in the block.

    Returns:
        `bytes`: a sha256 digest.
    """
    material = _as_array(tokens, sequence=True)
    hasher = hashlib.sha256(b"bidirectional")
    hasher.update(b"K" + str(material.shape).encode() + np.ascontiguousarray(material).tobytes())
    hasher.update(b"I" + ",".join(item_hashes).encode())
    return hasher.digest()


def _as_array(value, sequence: bool = False) -> np.ndarray:
    """An int64 numpy view (or copy) of a tensor, an array or, with `sequence`, a list of ids or tuples."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().astype(np.int64, copy=False)
    if isinstance(value, np.ndarray):
        return value.astype(np.int64, copy=False)
    if sequence:
        return np.array(list(value), dtype=np.int64)
    raise TypeError(f"Key material must be a tensor or a numpy array, got {type(value).__name__}.")


def _item_runs(length: int, items_between: ItemsBetween) -> dict[tuple[int, int], tuple[str, ...]]:
    """Runs of positions covered by the same image placeholders, with the content hashes covering them.

    Bisects `[0, length)`: a range with no image is skipped whole, and a range whose one image covers both its ends
    lies inside that image's (contiguous) span, so the callable runs a few times per image rather than per token.
    """
    runs: dict[tuple[int, int], tuple[str, ...]] = {}
    pending = [(0, length)] if length else []
    while pending:
        low, high = pending.pop()
        found = tuple(items_between(low, high))
        if not found:
            continue
        if high - low == 1 or (
            len(found) == 1 and tuple(items_between(low, low + 1)) == found == tuple(items_between(high - 1, high))
        ):
            runs[(low, high)] = found
            continue
        middle = (low + high) // 2
        pending += [(low, middle), (middle, high)]
    return runs
