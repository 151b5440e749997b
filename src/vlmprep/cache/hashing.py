"""Content hashes of one image's pixel inputs.

The hash is the identity of an image everywhere vlmprep reuses work: encoder-cache keys and prefix-cache keys. Two
images behind identical placeholder token ids must never share features or KV, so the hash is a full sha256 over
every byte of the inputs (never a sample, never truncated), plus the family extras that change the embedding
(`image_sizes`, `image_grid_thw`, ...), plus an optional salt that keeps tenants apart.

The byte stream fed to sha256 is self-delimiting: every item is written as a type tag followed by length-prefixed
fields, so no two different inputs can produce the same stream (e.g. `{"a": "bc"}` vs `{"ab": "c"}`).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["hash_item_inputs"]

# Bumped whenever the byte stream changes, so hashes from an older layout never match new ones.
_HASH_VERSION = b"vlmprep.hash_image_inputs.v1"


def _write_field(hasher: hashlib._Hash, data: bytes | memoryview) -> None:
    # Length prefix first: makes the concatenation of fields unambiguous.
    hasher.update(struct.pack("<Q", len(data)))
    hasher.update(data)


def _write_header(hasher: hashlib._Hash, tag: bytes, *fields: str) -> None:
    hasher.update(tag)
    for field in fields:
        _write_field(hasher, field.encode("utf-8"))


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The raw memory of `tensor` as a flat byte view, copying only when the layout requires it."""
    if tensor.layout != torch.strided:
        raise TypeError(f"Cannot hash a tensor with layout {tensor.layout}; pass a dense tensor.")
    if tensor.device.type == "meta":
        raise ValueError("Cannot hash a tensor on the meta device: it has no data.")
    # `resolve_conj`/`resolve_neg` materialise lazy bits so that equal values always have equal bytes.
    tensor = tensor.detach().cpu().resolve_conj().resolve_neg().contiguous()
    # Viewing as uint8 is zero-copy for a contiguous tensor and works for dtypes numpy lacks (bfloat16, float8_*).
    flat = tensor.reshape(-1).view(torch.uint8)  # (numel * element_size,)
    return memoryview(flat.numpy())


def _update(hasher: hashlib._Hash, value: Any) -> None:
    """Feed one value to `hasher`, recursing into containers."""
    if isinstance(value, torch.Tensor):
        data = _tensor_bytes(value)
        _write_header(hasher, b"T", str(value.dtype), repr(tuple(value.shape)))
        _write_field(hasher, data)
    elif isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise TypeError("Cannot hash a numpy array of Python objects; convert it to a numeric dtype.")
        # Native byte order: the same values give the same hash whatever the array's endianness.
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))
        _write_header(hasher, b"N", array.dtype.str, repr(array.shape))
        _write_field(hasher, memoryview(array.reshape(-1)).cast("B"))
    elif value is None:
        hasher.update(b"0")
    elif isinstance(value, bool):
        # Before int: bool is a subclass of int, and True must not hash like 1.
        _write_header(hasher, b"B", repr(value))
    elif isinstance(value, int):
        _write_header(hasher, b"I", repr(value))
    elif isinstance(value, float):
        # `float.hex` is exact and canonical (repr would also be, but hex makes the intent obvious).
        _write_header(hasher, b"F", value.hex())
    elif isinstance(value, str):
        _write_header(hasher, b"S", value)
    elif isinstance(value, bytes):
        hasher.update(b"Y")
        _write_field(hasher, value)
    elif isinstance(value, torch.dtype):
        _write_header(hasher, b"D", str(value))
    elif isinstance(value, list | tuple):
        # Lists and tuples hash alike: processors return `image_sizes` as either, and the content is what counts.
        _write_header(hasher, b"L", str(len(value)))
        for item in value:
            _update(hasher, item)
    elif isinstance(value, Mapping):
        _write_header(hasher, b"M", str(len(value)))
        _update_mapping(hasher, value)
    else:
        # No fallback to `repr`: an arbitrary repr may embed an address (no hits) or elide data (false hits).
        raise TypeError(f"Cannot hash a value of type {type(value).__name__}.")


def _update_mapping(hasher: hashlib._Hash, mapping: Mapping[str, Any]) -> None:
    for key in sorted(mapping):
        if not isinstance(key, str):
            raise TypeError(f"Keys of hashed mappings must be str, got {type(key).__name__}.")
        _write_header(hasher, b"K", key)
        _update(hasher, mapping[key])


def hash_item_inputs(inputs: Mapping[str, Any], *, salt: str | None = None) -> str:
    """Full-width content hash of one image's pixel inputs and extras.

    Tensors and numpy arrays contribute their dtype, shape and every byte of their data (hashed straight from memory,
    so large pixel tensors cost one pass of sha256); Python scalars, strings, `None`, lists and tuples (hashed alike)
    and nested mappings contribute a canonical encoding. Keys are hashed with their names, in sorted order, so the
    order of the mapping does not matter.

    Args:
        inputs (`Mapping[str, Any]`):
            One image's inputs, e.g. `{"pixel_values": tensor, "image_sizes": (336, 336)}`. Values may be tensors,
            numpy arrays, `None`, `bool`/`int`/`float`/`str`/`bytes`, `torch.dtype`, and lists, tuples or mappings
            of those.
        salt (`str`, *optional*):
            Mixed into the hash when not `None`, so the same image under two salts (e.g. two tenants) gets two
            different hashes. `None` and `""` are different salts.

    Returns:
        `str`: the sha256 hexdigest (64 lowercase hex characters).

    Raises:
        `TypeError`: a value (or nested item) has a type that has no canonical encoding, or `salt` is not a `str`.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.cache.hashing import hash_item_inputs
    >>> pixels = torch.zeros(3, 16, 16)
    >>> h = hash_item_inputs({"pixel_values": pixels})
    >>> len(h), h == hash_item_inputs({"pixel_values": pixels.clone()})
    (64, True)
    >>> h == hash_item_inputs({"pixel_values": pixels}, salt="tenant-a")
    False

    ```
    """
    if not isinstance(inputs, Mapping):
        raise TypeError(f"`inputs` must be a mapping of names to values, got {type(inputs).__name__}.")
    if salt is not None and not isinstance(salt, str):
        raise TypeError(f"`salt` must be a str or None, got {type(salt).__name__}; pass e.g. `str(tenant_id)`.")
    hasher = hashlib.sha256(_HASH_VERSION)
    if salt is None:
        hasher.update(b"-")
    else:
        _write_header(hasher, b"+", salt)
    _update_mapping(hasher, inputs)
    return hasher.hexdigest()
