"""Item schemas: how the inputs of one modality hold its items, stated as data, with the one implementation that counts,
selects and checks items for every family.

A processor returns the items of a call (images, videos, audio clips) packed in a few ways, and a family states which
with a small closed vocabulary (after vLLM's `MultiModalFieldConfig`):

- `batched(key)`: one entry per item along the first axis (`(num_images, C, H, W)` pixels, `image_sizes`);
- `flat(key, sizes)`: the items' rows concatenated along an axis, each item's share given by another input
  (`Sizes`): Qwen2-VL's patches split by `image_grid_thw.prod(-1)`, Gemma 4's video frames by
  `num_frames_per_video`, LLaVA-OneVision's images grouped per sample by `batch_num_images` (items of no rows of
  it, `Sizes(empty_items=True)`: DeepSeek-OCR-2's images without crops; indices into another flat input's rows,
  moved with them, `rebased_on`: Molmo2's pooling indices on transformers 5.24);
- `sizes(key)`: the input that gives each item's share itself (`num_frames_per_video`), selected per item;
- `clip(key, mask, axis)`: one entry per item padded to the call's longest, with a mask of the real entries
  (a companion): both are cut to the longest real item of a selection, so an item hashes alike in any batch;
- `shared(key)`: one value for every item (passed whole with any selection).

Renames (an old input name a processor may still return) and unpadding (`ItemSchema.unpad`) complete it. The
generic implementation serves everything that reads items: `count_items`, `select_item_inputs` (the encoder's inputs
and the hashed input set), the checks before encoding, continuous batching's split of a call into requests, and
collation in serving and tests.
"""

# Over 400 lines: the closed item vocabulary and its one implementation (count, select, check, join), read together.

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from .validation import check_passed_with

__all__ = [
    "ItemInput",
    "ItemSchema",
    "Sizes",
    "batched",
    "clip",
    "default_schema",
    "flat",
    "grid_rows",
    "join_item_inputs",
    "select_items",
    "shared",
    "sizes",
]


def select_items(value: Any, indices: list[int]) -> Any:
    """The entries of a per-item input (tensor or list) for the given item indices, in that order."""
    if isinstance(value, torch.Tensor):
        return value[indices]
    return [value[index] for index in indices]


@dataclass(frozen=True)
class Sizes:
    """Each item's share of a `flat` input, read from another input that has one entry per item.

    Args:
        key (`str`): the input with one entry per item (a grid row, a frame count, ...).
        reduce (`str`, *optional*, defaults to `"value"`): `"value"` (the entry is the share) or `"prod"` (the
            product of the entry's last axis: a `(t, h, w)` grid row holds `t * h * w` patches).
        times (`Callable[[PreTrainedConfig], int]`, *optional*): a factor from the config (a view of `h * w`
            patches is `h * w * patch_size` pixel columns wide).
        one_each_without (`bool`, *optional*, defaults to `False`): without `key`, every row is an item of its own
            (LLaVA-OneVision without `batch_num_images`); otherwise `key` is needed with the flat input.
        computed (`Callable[[Any, dict], list[int]]`, *optional*): given the model and the call's inputs, the shares
            when no one input holds them (VideoLLaMA3's kept rows per video); `key` then names the input they come
            from, for the messages.
        empty_items (`bool`, *optional*, defaults to `False`): a share of 0 is an item with no rows of the flat input,
            the items being counted by another input (an image without crops: DeepSeek-OCR-2's `num_local_patches`);
            a selection of such items only leaves the flat input out, as a processor does for a call of them. By
            default a share of 0 is no item (a text-only sample of `batch_num_images`).
    """

    key: str
    reduce: Literal["value", "prod"] = "value"
    times: Callable[[Any], int] | None = None
    one_each_without: bool = False
    computed: Callable[[Any, dict], list[int]] | None = None
    empty_items: bool = False

    def of(self, model, model_kwargs: dict[str, Any], rows: int | None = None) -> list[int] | None:
        """Each item's share (items of no rows left out), or `None` when the input that gives them is missing."""
        if self.computed is not None:
            return [int(size) for size in self.computed(model, model_kwargs)]
        value = model_kwargs.get(self.key)
        if value is None:
            return None if not self.one_each_without or rows is None else [1] * rows
        value = torch.as_tensor(value)
        shares = value.prod(-1) if self.reduce == "prod" else value.reshape(-1)
        if self.times is not None:
            shares = shares * int(self.times(model.config))
        return [int(share) for share in shares.tolist()]


@dataclass(frozen=True)
class ItemInput:
    """How one input of a modality holds the modality's items (built by `batched`, `flat`, `sizes`, `clip`,
    `shared`).

    Args:
        key (`str`): the input's name.
        kind (`str`): `"batched"`, `"flat"`, `"sizes"`, `"clip"` or `"shared"`.
        shares (`Sizes`, *optional*): `"flat"`: each item's share of the input.
        axis (`int`, *optional*, defaults to `0`): `"flat"`: the axis the items' shares are concatenated along;
            `"clip"`: the axis of the real entries the mask marks (frames, samples).
        mask (`str`, *optional*): `"clip"`: the companion input marking each item's real entries.
        renamed_from (`str`, *optional*): an old name a processor may still return the input under; the selection
            carries `key`, the name the tower takes and the one hashed.
        flatten (`bool`, *optional*, defaults to `False`): `"batched"`: every axis but the last counts items (Fuyu:
            `(batch, patches, dim)` patches, one item each).
        item_axes (`int`, *optional*, defaults to `1`): `"batched"`: how many leading axes count items (Llama 3.2
            Vision: `(batch, images, ...)`, one row's images after another); a selection keeps them, the items in one
            row (`(1, items, ...)`).
        rebased_on (`str`, *optional*): `"flat"`: the flat input (split along its first axis) whose rows, flattened
            over every axis but the last, this input's entries index across the whole call (Molmo2's
            `image_token_pooling` on transformers 5.24 lists patches of every crop of `pixel_values`): a selection
            moves each item's entries to where its rows now sit, and joining moves each part's past the parts before
            it; negative entries (padding) are kept.
    """

    key: str
    kind: Literal["batched", "flat", "sizes", "clip", "shared"] = "batched"
    shares: Sizes | None = None
    axis: int = 0
    mask: str | None = None
    renamed_from: str | None = None
    flatten: bool = False
    rebased_on: str | None = None
    item_axes: int = 1

    def value(self, model_kwargs: dict[str, Any]) -> Any:
        """The input as the call passed it (under its old name when only that was passed), or `None`."""
        value = model_kwargs.get(self.key)
        if value is None and self.renamed_from is not None:
            value = model_kwargs.get(self.renamed_from)
        if value is not None and self.flatten:
            value = value.reshape(-1, value.shape[-1])
        if value is not None and self.item_axes > 1:
            value = value.flatten(0, self.item_axes - 1)
        return value


def batched(key: str, renamed_from: str | None = None, flatten: bool = False, item_axes: int = 1) -> ItemInput:
    """An input with one entry per item along its first axis, or its first `item_axes` axes (see `ItemInput`)."""
    return ItemInput(key, renamed_from=renamed_from, flatten=flatten, item_axes=item_axes)


def flat(key: str, shares: Sizes, axis: int = 0, rebased_on: str | None = None) -> ItemInput:
    """An input holding every item's share concatenated along `axis`, the shares given by `shares` (indices into
    another flat input's rows when `rebased_on` names it)."""
    return ItemInput(key, "flat", shares=shares, axis=axis, rebased_on=rebased_on)


def sizes(key: str) -> ItemInput:
    """The input giving each item's share of the flat inputs, selected per item (items of no rows left out)."""
    return ItemInput(key, "sizes")


def clip(key: str, mask: str, axis: int = 1) -> ItemInput:
    """One padded entry per item with the `mask` of its real entries along `axis` (padding at the end)."""
    return ItemInput(key, "clip", axis=axis, mask=mask)


def shared(key: str) -> ItemInput:
    """An input with one value for every item, passed whole with any selection."""
    return ItemInput(key, "shared")


def default_schema(
    pixel_keys: tuple[str, ...] = ("pixel_values",),
    per_item_keys: tuple[str, ...] = ("image_sizes",),
    unpad: Callable[[Any, dict, dict], dict] | None = None,
) -> ItemSchema:
    """One entry per item of every input, counted by the pixel inputs: what most families' processors return."""
    return ItemSchema(tuple(batched(key) for key in (*pixel_keys, *per_item_keys)), unpad, counted_by=pixel_keys)


def grid_rows(pixel_key: str, grid_key: str, *extra: ItemInput) -> ItemSchema:
    """Flattened patches on a grid: `pixel_key`'s rows split by the product of each `grid_key` row (Qwen2-VL)."""
    return ItemSchema((flat(pixel_key, Sizes(grid_key, "prod")), batched(grid_key), *extra))


@dataclass(frozen=True)
class ItemSchema:
    """How the inputs of one modality hold its items: the inputs in the vocabulary above, and what the generic
    implementation cannot know.

    Args:
        inputs (`tuple[ItemInput, ...]`): the modality's per-item inputs; the first one passed counts the items
            (a `flat` input through its shares).
        unpad (`Callable[[Any, dict, dict], dict]`, *optional*): given the model, the call's inputs and the selected
            items' inputs, the same
            without the padding a processor adds to batch items together (a larger image's size, more crops), which
            the model ignores: an item's inputs and hash are then the same alone or in any batch.
        counted_by (`tuple[str, ...]`, *optional*): the inputs that count the items, when not all of them do (by
            default only the pixel inputs count: sizes passed alone stand for items the cache holds).
    """

    inputs: tuple[ItemInput, ...]
    unpad: Callable[[Any, dict, dict], dict] | None = None
    counted_by: tuple[str, ...] | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        """The names of every input of the schema (companion masks included)."""
        names = [item_input.key for item_input in self.inputs]
        return (*names, *(item_input.mask for item_input in self.inputs if item_input.mask))

    def count(self, model, model_kwargs: dict[str, Any]) -> int | None:
        """How many items the call's inputs hold (`None`: none passed), after `check`.

        Args:
            model: the drop-in (its config, for `Sizes`).
            model_kwargs (`dict[str, Any]`): the call's inputs.

        Returns:
            `int` or `None`
        """
        self.check(model, model_kwargs)
        for item_input in self.inputs:
            value = item_input.value(model_kwargs)
            if value is None or item_input.kind == "shared":
                continue
            if self.counted_by is not None and item_input.key not in self.counted_by:
                continue
            if item_input.kind == "flat":
                return len(self._shares(model, model_kwargs, item_input))
            if item_input.kind == "sizes":
                return len([size for size in torch.as_tensor(value).reshape(-1).tolist() if size])
            return len(value) if isinstance(value, (list, tuple)) else value.shape[0]
        return None

    def check(self, model, model_kwargs: dict[str, Any]) -> None:
        """Raise a clear `ValueError` when a flat input comes without its shares, or its shares do not add up to it.

        Args:
            model: the drop-in.
            model_kwargs (`dict[str, Any]`): the call's inputs.
        """
        for item_input in self.inputs:
            value = item_input.value(model_kwargs)
            if item_input.kind != "flat" or value is None:
                continue
            shares = self._shares(model, model_kwargs, item_input)
            total = value.shape[item_input.axis] if isinstance(value, torch.Tensor) else len(value)
            if sum(shares) != total:
                source = item_input.shares.key
                raise ValueError(
                    f"`{item_input.key}` holds {total} entries along axis {item_input.axis} but `{source}` gives "
                    f"{len(shares)} item(s) of {sum(shares)} in all ({shares}). Pass the `{item_input.key}` and "
                    f"`{source}` this model's processor returned together."
                )

    def select(self, model, model_kwargs: dict[str, Any], indices: list[int]) -> dict[str, Any]:
        """The inputs of the given items, in that order, under their current names and without batch padding.

        Args:
            model: the drop-in.
            model_kwargs (`dict[str, Any]`): the call's inputs.
            indices (`list[int]`): indices among the call's items of the modality.

        Returns:
            `dict[str, Any]`: keyword arguments of the modality's `get_<modality>_features`.
        """
        selected = {}
        for item_input in self.inputs:
            value = item_input.value(model_kwargs)
            if value is None:
                continue
            if item_input.kind == "shared":
                selected[item_input.key] = value
            elif item_input.kind == "flat":
                shares = self._shares(model, model_kwargs, item_input)
                chosen = _select_shares(value, shares, indices, item_input.axis)
                if item_input.shares.empty_items and not sum(shares[index] for index in indices):
                    continue  # items without rows of it: no input, as the processor returns them
                if item_input.rebased_on is not None:
                    chosen = self._rebased(model, model_kwargs, item_input, shares, indices, chosen)
                selected[item_input.key] = chosen
            elif item_input.kind == "sizes":
                real = [size for size in torch.as_tensor(value).reshape(-1).tolist() if size]
                chosen = [real[index] for index in indices]
                selected[item_input.key] = (
                    torch.tensor(chosen, dtype=value.dtype, device=value.device)
                    if isinstance(value, torch.Tensor)
                    else chosen
                )
            elif item_input.kind == "clip":
                selected.update(_select_clips(model_kwargs, item_input, indices))
            else:
                chosen = select_items(value, indices)
                if item_input.item_axes > 1 and isinstance(chosen, torch.Tensor):
                    # The items keep the input's leading axes, one row of them: `(1, items, ...)` for two
                    chosen = chosen[(None,) * (item_input.item_axes - 1)]
                selected[item_input.key] = chosen
        return selected if self.unpad is None else self.unpad(model, model_kwargs, selected)

    def _shares(self, model, model_kwargs: dict[str, Any], item_input: ItemInput) -> list[int]:
        value = item_input.value(model_kwargs)
        rows = value.shape[item_input.axis] if isinstance(value, torch.Tensor) else len(value)
        shares = item_input.shares
        if shares.computed is None and not shares.one_each_without:
            check_passed_with(model_kwargs, item_input.key, shares.key, "it gives each item's share of it")
        found = shares.of(model, model_kwargs, rows)
        return found if shares.empty_items else [share for share in found if share]

    def _rebased(
        self, model, model_kwargs: dict[str, Any], item_input: ItemInput, shares: list[int], indices: list[int], chosen
    ) -> torch.Tensor:
        # Each selected item's entries shifted by how far its rows of `rebased_on` moved (`ItemInput.rebased_on`)
        target = next(other for other in self.inputs if other.key == item_input.rebased_on)
        rows = target.value(model_kwargs)
        per_row, target_shares = math.prod(rows.shape[1:-1]), self._shares(model, model_kwargs, target)
        parts, placed = [], 0
        pieces = torch.split(chosen, [shares[index] for index in indices], dim=item_input.axis)
        for piece, index in zip(pieces, indices, strict=True):
            shift = (placed - sum(target_shares[:index])) * per_row
            parts.append(torch.where(piece >= 0, piece + shift, piece))
            placed += target_shares[index]
        return torch.cat(parts, dim=item_input.axis) if parts else chosen


def _select_shares(value: Any, shares: list[int], indices: list[int], axis: int) -> Any:
    if not isinstance(value, torch.Tensor):
        starts = [sum(shares[:index]) for index in range(len(shares))]
        return [entry for index in indices for entry in value[starts[index] : starts[index] + shares[index]]]
    parts = torch.split(value, shares, dim=axis)
    if not indices:
        return value.narrow(axis, 0, 0)
    return torch.cat([parts[index] for index in indices], dim=axis)


def _select_clips(model_kwargs: dict[str, Any], item_input: ItemInput, indices: list[int]) -> dict[str, Any]:
    # Cut to one past the last real entry of the selection's longest clip: the feature extractors pad at the end, so
    # entries after it are padding in every selected clip.
    values, mask = item_input.value(model_kwargs)[indices], model_kwargs.get(item_input.mask)
    if mask is None:
        return {item_input.key: values}
    mask = mask[indices]
    real = mask.bool()
    last = torch.where(real, torch.arange(real.shape[-1], device=real.device) + 1, 0).amax(-1)
    length = int(last.max()) if last.numel() else 0
    return {item_input.key: values.narrow(item_input.axis, 0, length), item_input.mask: mask[:, :length]}


def join_item_inputs(schema: ItemSchema, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The inputs of several calls' items as one call holds them: the inverse of `ItemSchema.select`, as a processor
    batches items (collation in continuous batching's encoder calls and in tests).

    Batched inputs are concatenated along their first axis (zero-padded to the largest beyond it, as a processor pads
    images or crops), flat ones along their axis (padded so too along the first), sizes one after the other, clips padded at the end to the longest
    with their masks (padding marked unreal), shared ones taken from the first part holding them.

    Args:
        schema (`ItemSchema`): how the modality's inputs hold its items.
        parts (`list[dict[str, Any]]`): each call's inputs of the modality (a part may lack some or all of them).

    Returns:
        `dict[str, Any]`: the joined inputs, only those some part holds.
    """
    joined: dict[str, Any] = {}
    for item_input in schema.inputs:
        values = [part[item_input.key] for part in parts if part.get(item_input.key) is not None]
        if not values:
            continue
        if item_input.kind == "shared":
            joined[item_input.key] = values[0]
        elif item_input.kind == "clip":
            masks = [part.get(item_input.mask) for part in parts if part.get(item_input.key) is not None]
            joined.update(_join_clips(item_input, values, masks))
        elif item_input.kind == "flat":
            if item_input.rebased_on is not None:
                values = _rebased_parts(item_input, parts)
            # Rows of items (crops, frames) are padded to the largest as a processor pads them; indices never are
            first_axis = (
                item_input.axis == 0 or item_input.axis == -values[0].ndim if hasattr(values[0], "ndim") else False
            )
            joined[item_input.key] = _join(values, item_input.axis, pad=first_axis and item_input.rebased_on is None)
        else:
            joined[item_input.key] = _join(values, 0, pad=item_input.kind == "batched")
    return joined


def _rebased_parts(item_input: ItemInput, parts: list[dict[str, Any]]) -> list[torch.Tensor]:
    # Each part's entries index its own rows of `rebased_on`: moved past the rows of the parts before it
    values, offset = [], 0
    for part in parts:
        value, rows = part.get(item_input.key), part.get(item_input.rebased_on)
        if value is not None:
            values.append(torch.where(value >= 0, value + offset, value))
        if rows is not None:
            offset += rows.numel() // rows.shape[-1]
    return values


def _join(values: list[Any], axis: int, pad: bool) -> Any:
    if not all(isinstance(value, torch.Tensor) for value in values):
        return [entry for value in values for entry in (value.tolist() if hasattr(value, "tolist") else value)]
    if pad and len({value.shape[1:] for value in values}) > 1:
        shape = [max(value.shape[dim] for value in values) for dim in range(values[0].ndim)]
        values = [_zero_padded(value, shape[1:]) for value in values]
    return torch.cat(values, dim=axis)


def _zero_padded(value: torch.Tensor, trailing: list[int]) -> torch.Tensor:
    # Zeros after the end of every axis but the first, up to `trailing` (a processor's padding of a batch)
    pad = []
    for dim in reversed(range(1, value.ndim)):
        pad += [0, trailing[dim - 1] - value.shape[dim]]
    return torch.nn.functional.pad(value, pad)


def _join_clips(item_input: ItemInput, values: list[torch.Tensor], masks: list[Any]) -> dict[str, Any]:
    axis = item_input.axis % values[0].ndim
    longest = max(value.shape[axis] for value in values)

    def padded(value: torch.Tensor, dim: int) -> torch.Tensor:
        pad = [0, 0] * (value.ndim - 1 - dim) + [0, longest - value.shape[dim]]
        return torch.nn.functional.pad(value, pad)

    joined = {item_input.key: torch.cat([padded(value, axis) for value in values])}
    if all(mask is not None for mask in masks):
        joined[item_input.mask] = torch.cat([padded(mask, mask.ndim - 1) for mask in masks])
    return joined
