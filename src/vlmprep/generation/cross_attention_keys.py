"""Cross-attention masks as prefix-key material: which items each token sees, one signature per token.

After a cross-attention layer, a token's keys and values depend on the items its row of the mask lets it see (Llama
3.2 Vision's `cross_attention_mask`, `(batch, seq, images, tiles)`; IDEFICS's `image_attention_mask`,
`(batch, seq, images)`). Two prompts with the same ids and items but another mask (a hand-made one) must not share
stored keys and values, so the mask is part of each token's key, as token types and positions are. A token's
signature sums a fixed 64-bit weight per (item slot, part) cell it sees; cells are numbered item by item, so a prompt
that adds items leaves the earlier tokens' signatures as they were, and a later turn still finds the earlier ones.

An item slot is the row's j-th item in prompt order, whose content hash the key holds from its placeholder on. A token
that sees an item placed after it (a mask no processor writes) depends on what its own key does not hold yet: such a
row is neither looked up nor stored (`sees_items_ahead`).
"""

from __future__ import annotations

import numpy as np
import torch


def mask_signatures(mask: torch.Tensor | np.ndarray, axis: int) -> np.ndarray:
    """One signature per token of what a cross-attention mask lets it see (0: nothing).

    Args:
        mask (`torch.Tensor` or `np.ndarray`): the mask, its sequence on `axis` and its item slots on the next axis.
        axis (`int`): the sequence axis (1 for `(batch, seq, items, ...)`).

    Returns:
        `np.ndarray` of int64, shape `(batch, seq)`.

    Example:

    ```python
    >>> import torch
    >>> sees = mask_signatures(torch.tensor([[[0, 0], [1, 0], [1, 1]]]), axis=1)
    >>> sees.shape, int(sees[0, 0])
    ((1, 3), 0)
    >>> bool((mask_signatures(torch.tensor([[[0, 0, 0], [1, 0, 0], [1, 1, 0]]]), axis=1) == sees).all())
    True

    ```
    """
    cells = _cells(mask, axis)  # (batch, seq, cells)
    weights = _cell_weights(cells.shape[-1])
    return (cells.astype(np.uint64) * weights).sum(axis=-1, dtype=np.uint64).view(np.int64)


def sees_items_ahead(per_token: dict, mask_axes: dict[str, int], row: int, item_starts: list[int]) -> bool:
    """Whether a token of `row` sees, by one of the cross-attention masks, an item slot whose item starts after it,
    or a slot the row has no item for.

    Args:
        per_token (`dict`): the call's per-token inputs, the masks among them.
        mask_axes (`dict[str, int]`): each mask's name -> its sequence axis (its item slots on the next axis).
        row (`int`): the batch row.
        item_starts (`list[int]`): the positions of the row's items, in prompt order (slot j is the j-th).

    Returns:
        `bool`
    """
    for key, axis in mask_axes.items():
        if key not in per_token:
            continue
        value = np.moveaxis(_host(per_token[key]), axis, 1)[row]  # (seq, items, ...)
        seen = value.reshape(*value.shape[:2], -1).any(axis=-1)  # (seq, items)
        starts = np.full(seen.shape[1], np.iinfo(np.int64).max, dtype=np.int64)
        known = sorted(item_starts)[: seen.shape[1]]
        starts[: len(known)] = known
        if bool((seen & (np.arange(seen.shape[0])[:, None] < starts[None, :])).any()):
            return True
    return False


def _cells(mask: torch.Tensor | np.ndarray, axis: int) -> np.ndarray:
    value = np.moveaxis(_host(mask), axis, 1)  # (batch, seq, items, ...)
    return value.reshape(*value.shape[:2], -1) != 0


def _cell_weights(count: int) -> np.ndarray:
    # splitmix64 of the cell number: fixed, well-mixed weights, the same in every process
    with np.errstate(over="ignore"):
        z = np.arange(1, count + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _host(value: torch.Tensor | np.ndarray) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else value.detach().cpu().numpy()
