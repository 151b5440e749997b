"""The server's media cache: an image re-sent with the same bytes is neither decoded nor run through the image processor
again.

A chat app re-sends the whole conversation every turn, every earlier image with it (base64 data URLs, or the same
fetched URL). `MediaCache` keys each image by a fast hash (`media_key`) of its raw bytes, or of a data URL's base64
text, and the tenant's salt: a hit returns the decoded image (the very `PIL.Image` object decoded the first time) and,
per processor and image-processor arguments, the image processor's output for that image alone. It is bounded in
bytes (decoded pixels and processed arrays) and evicts the least recently used images.

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
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..utils.logging import get_logger
from .body_texts import ResentBodyTexts
from .text_keys import TextKeyMemo

__all__ = ["CachingImageProcessor", "MediaCache", "MediaCacheStats", "media_key"]

logger = get_logger(__name__)


def media_key(data: bytes, salt: str | None = None, kind: str = "image", encoding: str | None = None) -> str:
    """The media cache's key of an image's (or audio clip's) raw bytes, or of their base64 text: 128 bits of a
    SHA-256 digest (the fastest strong hash here, with the CPU's SHA instructions; collisions are not a practical
    concern), under the tenant's salt (one tenant cannot learn, by timing, which images another sent).

    Args:
        data (`bytes`): the encoded image or clip, as the request sent it (or its base64 text, with `encoding`).
        salt (`str`, *optional*): the request's tenant salt.
        kind (`str`, *optional*, defaults to `"image"`): what the bytes are decoded as; the same bytes sent as an
            image and as an audio clip are two entries.
        encoding (`str`, *optional*): `"base64"` when `data` is the base64 text of the bytes (a data URL's payload,
            hashed without decoding it): a key apart from every key of raw bytes.

    Returns:
        `str`: hex digest.
    """
    hasher = hashlib.sha256(b"vlmprep-media\0")
    hasher.update(f"{kind}\0{encoding or 'raw'}\0".encode())
    if salt is not None:
        salted = salt.encode()
        hasher.update(len(salted).to_bytes(8, "little") + salted)
    else:
        hasher.update(b"-")
    hasher.update(data)
    return hasher.hexdigest()[:32]


@dataclass
class MediaCacheStats:
    """A snapshot of a [`MediaCache`]'s counters.

    Args:
        decode_hits (`int`): images taken decoded from the cache.
        decodes (`int`): images decoded (misses).
        process_hits (`int`): images whose image-processor output came from the cache.
        processed (`int`): images run through an image processor (misses, and the one-time join checks).
        bytes (`int`): bytes held (images, processed arrays and the texts of `texts_recognized` and
            `body_texts_recalled`), never more than `max_bytes`.
        entries (`int`): images held.
        evictions (`int`): images dropped to make room.
        max_bytes (`int`): the byte budget.
        texts_recognized (`int`): data URLs' texts recognized as recent ones, not hashed again (`TextKeyMemo`).
        body_texts_recalled (`int`): data URLs recalled from a request body's bytes as recent ones, not checked or
            decoded again (`ResentBodyTexts`).
    """

    decode_hits: int = 0
    decodes: int = 0
    process_hits: int = 0
    processed: int = 0
    bytes: int = 0
    entries: int = 0
    evictions: int = 0
    max_bytes: int = 0
    texts_recognized: int = 0
    body_texts_recalled: int = 0


class _Entry:
    __slots__ = ("image", "processed", "bytes")

    def __init__(self, image: Any, size: int):
        self.image = image
        self.processed: dict[tuple, Any] = {}
        self.bytes = size


class MediaCache:
    """Decoded images and their image-processor outputs, keyed by `media_key` of the raw bytes, LRU within a budget.

    Thread-safe: the server reads requests' images in worker threads.

    Args:
        max_bytes (`int`, *optional*, defaults to 256 MiB): budget for decoded pixels and processed arrays.

    Example:

    ```python
    >>> from vlmprep.serving.media_cache import MediaCache
    >>> MediaCache(max_bytes=2**20).stats.entries
    0

    ```
    """

    def __init__(self, max_bytes: int = 256 * 2**20):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"`max_bytes` must be a positive int, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._stats = MediaCacheStats(max_bytes=max_bytes)
        # (image-processor class, arguments) -> whether the join of per-image outputs equals its batch output
        self._join_checked: dict[tuple, bool] = {}
        self._texts = TextKeyMemo(max_bytes // 4)
        # Read by the app's JSON parser (`parse_json_body`): a re-sent data URL comes back as the string `_texts` holds
        self.body_texts = ResentBodyTexts(max_bytes // 4)

    @property
    def stats(self) -> MediaCacheStats:
        """A snapshot of the counters."""
        with self._lock:
            stats = MediaCacheStats(**{**self._stats.__dict__, "entries": len(self._entries)})
            stats.bytes += self._texts.bytes + self.body_texts.bytes
            stats.texts_recognized, stats.body_texts_recalled = self._texts.recognized, self.body_texts.recalled
            return stats

    def text_key(self, text: str, namespace: tuple, compute) -> str:
        """The key of a data URL's base64 text, not hashed again when equal to a recent one (`TextKeyMemo.key`)."""
        key = self._texts.key(text, namespace, compute)
        with self._lock:
            self._evict()  # the texts share the budget
        return key

    def decoded(self, key: str, decode) -> Any:
        """The decoded image (or audio clip) of `key`, from the cache or from `decode()` (then stored).

        Args:
            key (`str`): `media_key` of the raw bytes.
            decode (`Callable[[], PIL.Image.Image | DecodedAudio]`): decodes the bytes (and checks them); called on a
                miss only.

        Returns:
            `PIL.Image.Image | DecodedAudio`
        """
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self._stats.decode_hits += 1
                return entry.image
        image = decode()  # outside the lock: decoding is the slow part
        size = _decoded_size(image)
        with self._lock:
            self._stats.decodes += 1
            if key not in self._entries:
                self._entries[key] = _Entry(image, size)
                self._stats.bytes += size
                self._evict()
            return self._entries[key].image if key in self._entries else image

    def processed(self, key: str, signature: tuple) -> Any:
        """The stored image-processor output of image `key` under `signature`, or `None`."""
        with self._lock:
            entry = self._entries.get(key)
            output = entry.processed.get(signature) if entry is not None else None
            if output is not None:
                self._stats.process_hits += 1
            return output

    def store_processed(self, key: str, signature: tuple, output: dict) -> None:
        """Stores one image's image-processor output (when the image itself is still held)."""
        with self._lock:
            self._stats.processed += 1
            entry = self._entries.get(key)
            if entry is None or signature in entry.processed:
                return
            size = sum(_nbytes(value) for value in output.values())
            entry.processed[signature] = output
            entry.bytes += size
            self._stats.bytes += size
            self._evict()

    def join_axis(self, signature: tuple) -> int | bool | None:
        """How an image processor (by class, configuration and arguments) joins items: an axis, `False` when its batch
        is no join of its items, `None` when not checked yet."""
        with self._lock:
            return self._join_checked.get(signature)

    def record_join_axis(self, signature: tuple, axis: int | bool) -> None:
        """Records what `CachingImageProcessor` found checking a join (see `join_axis`)."""
        with self._lock:
            self._join_checked[signature] = axis

    def count_processed(self, images: int) -> None:
        """Counts images run through an image processor outside `store_processed` (a join check)."""
        with self._lock:
            self._stats.processed += images

    def _evict(self) -> None:
        while self._stats.bytes + self._texts.bytes + self.body_texts.bytes > self.max_bytes and self._entries:
            _, entry = self._entries.popitem(last=False)
            self._stats.bytes -= entry.bytes
            self._stats.evictions += 1


def _decoded_size(decoded: Any) -> int:
    """Bytes held by a decoded image (its pixels) or audio clip (its samples)."""
    waveform = getattr(decoded, "waveform", None)
    if waveform is not None:
        return _nbytes(waveform)
    return decoded.width * decoded.height * len(decoded.getbands())


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(item) for item in value)
    return 8


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
