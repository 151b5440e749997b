"""What a cache layer holds per token beyond its keys and values (an attention indexer's keys), read and restored.

An indexed-attention layer (`DynamicIndexedLayer`: GLM-5-Next, Qwen4-exp; MiniMax M3's `MiniMaxM3VLSparseCacheLayer`)
also caches, per token, what its indexer scores queries against (and, for some, the positions of those keys). Those
tensors grow with the sequence like K/V, so the prefix store keeps them per token next to the KV and restores them on
a hit. Nothing here names a layer class: what a layer holds is read from the layer itself.

- The layer's *extra tensors* are its tensor attributes other than what transformers' own KV and running-state layers
  hold (`KV_PART_ATTRIBUTES`, read from those classes).
- Their token and batch axes are found by asking the layer's own code on a shape-only copy (meta tensors, nothing is
  computed or copied): `crop(-1)` shortens the token axis by one, `batch_repeat_interleave(2)` doubles the batch axis.
  A tensor neither method resizes that way (a fixed-size state, an unknown buffer) cannot be stored per token: the
  layer is refused (`UnsupportedCacheLayer`) rather than restored without it.
- Its other attributes (the flags its lazy initialization set: `is_indexer_initialized`, dtype, device) are set again
  on restore; an attribute that could hold a count (an int or float) or a container is refused, as restoring the value
  of another length would be silently wrong.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import (
    Cache,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionCacheLayerMixin,
    LinearAttentionLayer,
)

__all__ = [
    "KV_PART_ATTRIBUTES",
    "ExtraTensor",
    "LayerExtras",
    "UnsupportedCacheLayer",
    "describe_layer_extras",
    "extended_layer_classes",
    "extra_states",
    "restore_layer_extras",
]

# What transformers' KV layers (full, sliding) and running-state layers hold: the store handles those already
KV_PART_ATTRIBUTES = frozenset(
    {*vars(DynamicLayer()), *vars(DynamicSlidingWindowLayer(sliding_window=1)), *vars(LinearAttentionLayer())}
)
# Attribute values set again as they were: flags and where the tensors live (a device is mapped to the call's)
_FLAG_TYPES = (bool, str, type(None), torch.dtype, torch.device)


class UnsupportedCacheLayer(ValueError):
    """A cache layer holds something the prefix store cannot keep per token (named in the message)."""


@dataclass(frozen=True)
class ExtraTensor:
    """One per-token tensor attribute of a cache layer.

    Args:
        layer (`int`): the cache layer's index.
        name (`str`): the attribute holding the tensor.
        batch_axis (`int`): its batch axis.
        token_axis (`int`): its token axis.
    """

    layer: int
    name: str
    batch_axis: int
    token_axis: int


@dataclass(frozen=True)
class LayerExtras:
    """What a model's cache layers hold per token beyond K/V, and the flags to set again when restoring it.

    Args:
        tensors (`tuple[ExtraTensor, ...]`): the per-token tensors, stored after the layers' K/V in that order.
        flags (`tuple[tuple[int, str, Any], ...]`): `(layer, attribute, value)` set after the tensors are restored.
    """

    tensors: tuple[ExtraTensor, ...] = ()
    flags: tuple[tuple[int, str, Any], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.tensors)


def extended_layer_classes(cache: Cache) -> list[str]:
    """Class names of the cache's layers that hold more than transformers' KV and running-state layers (an indexer's
    keys), read from a fresh cache's attributes; empty when there are none.

    Args:
        cache (`Cache`): a cache as the model builds it (`DynamicCache(config=...)`), before any forward.

    Returns:
        `list[str]`: sorted class names.
    """
    return sorted({type(layer).__name__ for layer in cache.layers if set(vars(layer)) - KV_PART_ATTRIBUTES})


def describe_layer_extras(cache: Cache, length: int) -> LayerExtras:
    """Find, after a call's forwards, every per-token tensor its layers hold beyond K/V and their axes.

    Args:
        cache (`Cache`): the call's dynamic cache, holding `length` tokens.
        length (`int`): the tokens the cache holds.

    Returns:
        `LayerExtras`: empty when the layers hold only K/V and running states.

    Raises:
        `UnsupportedCacheLayer`: a layer holds a tensor that is not per token, or an attribute whose value could depend
            on the length (it names the layer class and the attribute).
    """
    tensors, flags = [], []
    for index, layer in enumerate(cache.layers):
        extra = {name: value for name, value in vars(layer).items() if name not in KV_PART_ATTRIBUTES}
        held = {name: value for name, value in extra.items() if isinstance(value, torch.Tensor)}
        if not held:
            continue
        where = f"the cache layer {type(layer).__name__} (layer {index})"
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            raise UnsupportedCacheLayer(f"{where} holds {sorted(held)} next to a running state; they are not stored")
        token_axes = _resized_axes(layer, held, "crop", -1)
        batch_axes = _resized_axes(layer, held, "batch_repeat_interleave", 2)
        for name, value in held.items():
            token_axis, batch_axis = token_axes.get(name), batch_axes.get(name)
            if token_axis is None or batch_axis is None or value.shape[token_axis] != length:
                raise UnsupportedCacheLayer(
                    f"{where} holds `{name}` of shape {tuple(value.shape)}, which is not one entry per cached token "
                    f"({length} tokens): the prefix store cannot keep it per token"
                )
            tensors.append(ExtraTensor(index, name, batch_axis, token_axis))
        for name, value in extra.items():
            if name in held:
                continue
            if not isinstance(value, _FLAG_TYPES):
                raise UnsupportedCacheLayer(
                    f"{where} holds `{name}` = {value!r}, which may depend on the cached length: the prefix store "
                    "cannot restore it"
                )
            flags.append((index, name, value))
    return LayerExtras(tuple(tensors), tuple(flags))


def _resized_axes(layer, held: dict[str, torch.Tensor], method: str, argument: int) -> dict[str, int]:
    """The one axis of each held tensor that the layer's own `method(argument)` resizes, run on a shape-only copy:
    shortened by one for `crop(-1)`, doubled for `batch_repeat_interleave(2)`."""
    probe = copy.copy(layer)  # a shallow copy whose tensors are replaced: the layer itself is never touched
    for name, value in vars(layer).items():
        if isinstance(value, torch.Tensor):
            setattr(probe, name, torch.empty(value.shape, dtype=value.dtype, device="meta"))
    try:
        getattr(probe, method)(argument)
    except Exception as error:  # a layer whose method cannot run on shapes: its extras are not understood
        raise UnsupportedCacheLayer(
            f"the cache layer {type(layer).__name__}'s `{method}` could not be probed ({error}): its extra tensors "
            f"{sorted(held)} are not stored"
        ) from error
    axes = {}
    for name, value in held.items():
        after = getattr(probe, name, None)
        if not isinstance(after, torch.Tensor) or after.ndim != value.ndim:
            continue
        changed = [axis for axis in range(value.ndim) if after.shape[axis] != value.shape[axis]]
        expected = (lambda size: size - 1) if method == "crop" else (lambda size: 2 * size)
        if len(changed) == 1 and after.shape[changed[0]] == expected(value.shape[changed[0]]):
            axes[name] = changed[0]
    return axes


def extra_states(cache: Cache, extras: LayerExtras) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each per-token tensor shaped as the store keeps K/V, `(batch, 1, tokens, *rest)`, with empty values.

    Args:
        cache (`Cache`): the call's cache.
        extras (`LayerExtras`): from `describe_layer_extras`.

    Returns:
        `list[tuple[torch.Tensor, torch.Tensor]]`: one `(tensor, empty)` pair per extra tensor, in order.
    """
    states = []
    for extra in extras.tensors:
        value = getattr(cache.layers[extra.layer], extra.name)
        # (batch, tokens, *rest) -> (batch, 1, tokens, *rest): the store slices tokens on axis 1 of a row's tensor
        value = value.movedim((extra.batch_axis, extra.token_axis), (0, 1)).unsqueeze(1)
        states.append((value, value.new_empty((*value.shape[:3], 0))))
    return states


def restore_layer_extras(cache: Cache, extras: LayerExtras, stored: list[torch.Tensor], device: torch.device) -> None:
    """Set each layer's per-token tensors (one batch row) and its flags, after its K/V were restored.

    Args:
        cache (`Cache`): the call's cache.
        extras (`LayerExtras`): what the stored rows hold.
        stored (`list[torch.Tensor]`): per extra tensor, its stored row `(1, 1, tokens, *rest)`.
        device (`torch.device`): where the model runs.
    """
    for extra, value in zip(extras.tensors, stored, strict=True):
        # (1, 1, tokens, *rest) -> the layer's own axes; a copy: the stored tensors are never handed out
        value = value[:, 0].movedim((0, 1), (extra.batch_axis, extra.token_axis)).to(device).clone()
        setattr(cache.layers[extra.layer], extra.name, value)
    for layer, name, value in extras.flags:
        setattr(cache.layers[layer], name, device if isinstance(value, torch.device) else value)
