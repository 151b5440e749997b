"""The server's media cache: an image re-sent with the same bytes is neither decoded nor run through the image processor
again.

A chat app re-sends the whole conversation every turn, every earlier image with it (base64 data URLs, or the same
fetched URL). `MediaCache` keys each image by a fast hash (`media_key`) of its raw bytes, or of a data URL's base64
text, and the tenant's salt: a hit returns the decoded image (the very `PIL.Image` object decoded the first time) and,
per processor and image-processor arguments, the image processor's output for that image alone. It is bounded in
bytes (decoded pixels and processed arrays) and evicts the least recently used images. The image processor's side,
each image's output taken from the cache, is `vlmprep.serving.processed_images.CachingImageProcessor`.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .body_texts import ResentBodyTexts
from .text_keys import TextKeyMemo

__all__ = ["MediaCache", "MediaCacheStats", "media_key"]


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
