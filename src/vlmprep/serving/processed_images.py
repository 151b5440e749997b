"""A processor's image processor for one request, each image's output taken from the server's media cache.

`CachingImageProcessor` stands in for a processor's image processor during one request (the request's own shallow copy
of the processor: the served processor is never changed). It processes each image of the request alone (or takes it
from the cache) and joins the per-image outputs as the image processor joins a batch: along the item axis, zero-padded
to the longest item (any-res patches, sub-images), or, for a batch given as one sample's list of images (Idefics3,
SmolVLM), along that sample's axis. Whether that join equals the image processor's own output is checked, once per
image-processor class and arguments, on the first request with several images: an image processor whose batch is not
the join of its items (one that pads differently, or mixes images) is never cached, and the server logs it.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..utils.logging import get_logger

if TYPE_CHECKING:
    from .media_cache import MediaCache

__all__ = ["CachingImageProcessor"]

logger = get_logger(__name__)

# How per-image outputs join into a batch: along the item axis (a flat list of images), or along a single sample's axis
# (a batch given as one sample's list of images, each image's outputs one row of sub-images).
_JOIN_AXES = (0, 1)


class CachingImageProcessor:
    """A processor's image processor for one request, taking each image's output from a `MediaCache` when it can.

    Only images of the request (by object, as `MediaCache.decoded` returned them) are looked up; a call with anything
    else, or positional arguments beyond the images, goes to the image processor unchanged. Every other attribute is
    the image processor's own.

    Args:
        image_processor (`BaseImageProcessor`): the served processor's image processor.
        cache (`MediaCache`): the server's media cache.
        keys (`dict[int, str]`): `id(image)` -> `media_key` of its bytes, for the request's images.
    """

    def __init__(self, image_processor: Any, cache: MediaCache, keys: dict[int, str]):
        self._inner = image_processor
        self._cache = cache
        self._keys = keys
        self._config = hashlib.blake2b(image_processor.to_json_string().encode(), digest_size=16).hexdigest()
        self._calls = 0
        self._served: list[tuple] | None = None

    @property
    def item_hints(self) -> dict[tuple[str, int], tuple]:
        """Hints for the content hashes of the request's images (`vlmprep.cache.hash_hints`), by `("image", index)`:
        each image's media key and the processor's signature, when this request's one image-processor call was
        answered from per-image outputs (the same hint, the same processed inputs); empty otherwise."""
        if self._calls != 1 or self._served is None:
            return {}
        return {("image", index): hint for index, hint in enumerate(self._served)}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __call__(self, images: Any = None, *args, **kwargs) -> Any:
        self._calls += 1
        self._served = None
        nested = isinstance(images, list) and len(images) == 1 and isinstance(images[0], list)
        flat = images[0] if nested else images
        if args or not isinstance(flat, list) or not flat or any(id(image) not in self._keys for image in flat):
            return self._inner(images, *args, **kwargs)
        signature = (type(self._inner).__qualname__, self._config, repr(sorted(kwargs.items(), key=lambda kv: kv[0])))
        join_axis = self._cache.join_axis((signature, nested))
        if join_axis is False:  # this image processor's batch is not the join of its items: never cached
            return self._inner(images, *args, **kwargs)
        outputs = [self._one(image, signature, nested, kwargs) for image in flat]
        served = [(self._keys[id(image)], signature, nested) for image in flat]
        if len(outputs) == 1:
            self._served = served
            return _batch_feature(outputs[0])
        if join_axis is None:
            # First request with several images: learn (and check) how this image processor joins items
            direct = self._inner(images, **kwargs)
            self._cache.count_processed(len(flat))
            join_axis = next((axis for axis in _JOIN_AXES if _equal(_join(outputs, axis), dict(direct))), False)
            self._cache.record_join_axis((signature, nested), join_axis)
            if join_axis is False:
                logger.warning(
                    "%s's output for several images is not the join of its outputs per image: its images are not "
                    "cached by the media cache.",
                    type(self._inner).__name__,
                )
            else:
                self._served = served  # `direct` is the join of the per-image outputs: the same processed inputs
            return direct
        joined = _join(outputs, join_axis)
        if joined is None:
            return self._inner(images, *args, **kwargs)
        self._served = served
        return _batch_feature(joined)

    def _one(self, image: Any, signature: tuple, nested: bool, kwargs: dict) -> dict:
        key = self._keys[id(image)]
        output = self._cache.processed(key, signature + (nested,))
        if output is None:
            output = dict(self._inner([[image]] if nested else [image], **kwargs))
            self._cache.store_processed(key, signature + (nested,), output)
        return output


def _batch_feature(data: dict) -> Any:
    from transformers import BatchFeature

    return BatchFeature(data=dict(data))


def _join(outputs: list[dict], axis: int) -> dict | None:
    """The per-image outputs joined along `axis` (arrays zero-padded to the longest beyond it), or `None` when their
    keys or types differ."""
    keys = outputs[0].keys()
    if any(output.keys() != keys for output in outputs):
        return None
    joined = {}
    for key in keys:
        values = [output[key] for output in outputs]
        value = _join_values(values, axis)
        if value is None:
            return None
        joined[key] = value
    return joined


def _join_values(values: list, axis: int) -> Any:
    first = values[0]
    if isinstance(first, (torch.Tensor, np.ndarray)):
        if any(type(value) is not type(first) or value.ndim != first.ndim for value in values) or first.ndim <= axis:
            return None
        shape = [max(value.shape[dim] for value in values) for dim in range(first.ndim)]
        padded = [_zero_pad(value, shape, axis) for value in values]
        if isinstance(first, torch.Tensor):
            return torch.cat(padded, dim=axis)
        return np.concatenate(padded, axis=axis)
    if isinstance(first, list):
        if axis == 0:
            return _pad_items([item for value in values for item in value])
        if any(len(value) != 1 or not isinstance(value[0], list) for value in values):
            return None
        return [[item for value in values for item in value[0]]]
    return first if all(_equal(value, first) for value in values) else None


def _pad_items(items: list) -> list:
    """A list of per-item arrays zero-padded to the largest (a batch returned without `return_tensors` is padded so)."""
    arrays = [item for item in items if isinstance(item, (torch.Tensor, np.ndarray))]
    if len(arrays) != len(items) or not items or any(item.ndim != items[0].ndim for item in items):
        return items
    shape = [max(item.shape[dim] for item in items) for dim in range(items[0].ndim)]
    return [_zero_pad(item, shape, axis=None) for item in items]


def _zero_pad(value: Any, shape: list[int], axis: int | None) -> Any:
    # (..., n_i, ...) -> (..., max n, ...) on every dim but `axis`, with zeros after the item's own values
    target = [size if dim != axis else value.shape[axis] for dim, size in enumerate(shape)]
    if list(value.shape) == target:
        return value
    padded = value.new_zeros(target) if isinstance(value, torch.Tensor) else np.zeros(target, dtype=value.dtype)
    padded[tuple(slice(0, size) for size in value.shape)] = value
    return padded


def _equal(left: Any, right: Any) -> bool:
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_equal(left[key], right[key]) for key in left)
    if isinstance(left, torch.Tensor) or isinstance(right, torch.Tensor):
        return (
            isinstance(left, torch.Tensor)
            and isinstance(right, torch.Tensor)
            and left.dtype == right.dtype
            and left.shape == right.shape
            and torch.equal(left, right)
        )
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        return (
            isinstance(left, np.ndarray)
            and isinstance(right, np.ndarray)
            and left.dtype == right.dtype
            and np.array_equal(left, right)
        )
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(_equal(a, b) for a, b in zip(left, right, strict=True))
    return type(left) is type(right) and left == right
