"""Items a client sends once, then names by the `uuid` of their content part: a chat stops re-sending megabytes a turn.

vLLM's convention for OpenAI chat requests: a media part may carry a client-chosen `uuid`
(`{"type": "image_url", "image_url": {"url": "data:..."}, "uuid": "sku-1234"}`); a later part may send the same `uuid`
with its data `null` or absent (`{"type": "image_url", "image_url": null, "uuid": "sku-1234"}`), and the server uses
the data it holds under that id. The same goes for `input_image`, `video_url`, `input_audio` and `audio_url` parts.

`ItemReferences` holds, per tenant, the data each id was last sent with: the part's media object as the request held
it (a data URL stays its base64 text, never decoded here). A resolved part is then the part the client sent first, and
goes through every check and cache a part with data goes through (media policy, limits, media cache): a reference
skips the upload, never a check. It is keyed on (tenant, id): whatever id a tenant sends, it reaches its own items
only. Without a tenant (`None`: no API key and no `cache_salt`), every client shares one namespace, as they share the
server's other caches, and a client that guesses another's id gets its item. Bounded in bytes, in entries and in time
since an item was last sent or named; least recently used first out. Naming an id that is not held (never sent,
evicted, expired, another tenant's: one answer for all) is an HTTP 400 asking for the data again.

`resolve_item_references` walks a checked request's messages in order: a part defines its id for every later part of
the same request, and the request's definitions are remembered once every reference of it resolved (a request refused
here leaves the store as it was). It reaches the store through `remember` and `recall` alone, with plain data in and out
(`ItemReferenceStore`), so that the store may later live in another process.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .errors import bad_request, shorten
from .request_checks import MEDIA_FIELDS

__all__ = [
    "DEFAULT_ITEM_REFERENCE_BYTES",
    "DEFAULT_ITEM_REFERENCE_ENTRIES",
    "DEFAULT_ITEM_REFERENCE_TTL_S",
    "ITEM_KINDS",
    "ItemReferenceMismatch",
    "ItemReferenceStore",
    "ItemReferences",
    "ItemReferencesStats",
    "UnknownItemReference",
    "resolve_item_references",
]

MIB = 1024 * 1024
DEFAULT_ITEM_REFERENCE_BYTES = 256 * MIB
DEFAULT_ITEM_REFERENCE_ENTRIES = 4096
# An hour since the item was last sent or named: a chat's pauses, not a day of someone's photos
DEFAULT_ITEM_REFERENCE_TTL_S = 3600.0
# The kind of item each media part type sends: a reference names an item of its own kind (an image's id is no audio
# clip), and becomes a part of the type the item was sent with (an `audio_url` reference to `input_audio` data too).
ITEM_KINDS = {
    "image_url": "image",
    "input_image": "image",
    "video_url": "video",
    "input_audio": "audio",
    "audio_url": "audio",
}
_KIND_NAMES = {"image": "an image", "video": "a video", "audio": "an audio clip"}


class UnknownItemReference(LookupError):
    """No item is held under a tenant's id (never sent, evicted or expired); the message is for the client."""


class ItemReferenceMismatch(ValueError):
    """An id names an item of another kind than the part naming it; the message is for the client."""


class ItemReferenceStore(Protocol):
    """What `resolve_item_references` needs of a store: plain, picklable data in and out."""

    def remember(self, tenant: Hashable | None, uuid: str, part_type: str, payload: str | dict) -> bool: ...

    def recall(self, tenant: Hashable | None, uuid: str, part_type: str) -> tuple[str, str | dict]: ...


@dataclass
class ItemReferencesStats:
    """A snapshot of an [`ItemReferences`]' counters.

    Args:
        remembered (`int`): items stored (a re-sent id counts again).
        recalled (`int`): references resolved from the store.
        misses (`int`): references to an id not held (never sent, evicted, expired).
        mismatches (`int`): references to an item of another kind.
        evictions (`int`): items dropped to keep within `max_bytes` and `max_entries`.
        expirations (`int`): items dropped `ttl_s` after they were last sent or named.
        entries (`int`): items held.
        bytes (`int`): bytes held (see `ItemReferences`), never more than `max_bytes`.
        max_bytes (`int`): the byte budget.
        max_entries (`int`): the most items held.
    """

    remembered: int = 0
    recalled: int = 0
    misses: int = 0
    mismatches: int = 0
    evictions: int = 0
    expirations: int = 0
    entries: int = 0
    bytes: int = 0
    max_bytes: int = 0
    max_entries: int = 0


class _Entry:
    __slots__ = ("part_type", "payload", "bytes", "used_at")

    def __init__(self, part_type: str, payload: str | dict, size: int, used_at: float):
        self.part_type = part_type
        self.payload = payload
        self.bytes = size
        self.used_at = used_at


class ItemReferences:
    """The media data clients sent under a part's `uuid`, per tenant, LRU within bounds (see the module docstring).

    An item's bytes are the characters of its strings (its payload's keys and values, and its id), four per character
    for text that is not ASCII (the most memory such a character takes); base64 data and URLs are ASCII. Thread-safe:
    the server resolves requests in worker threads.

    Args:
        max_bytes (`int`, *optional*, defaults to 256 MiB): budget for the items held; a larger item is not held.
        max_entries (`int`, *optional*, defaults to 4096): the most items held.
        ttl_s (`float`, *optional*, defaults to 3600.0): seconds an item is held after it was last sent or named.
        clock (`Callable[[], float]`, *optional*, defaults to `time.monotonic`): the time, in seconds.

    Example:

    ```python
    >>> from vlmprep.serving.item_refs import ItemReferences
    >>> store = ItemReferences(max_bytes=2**20)
    >>> store.remember("tenant-a", "sku-1234", "image_url", {"url": "data:image/png;base64,iVBORw0K"})
    True
    >>> store.recall("tenant-a", "sku-1234", "input_image")
    ('image_url', {'url': 'data:image/png;base64,iVBORw0K'})
    >>> store.recall("tenant-b", "sku-1234", "image_url")
    Traceback (most recent call last):
        ...
    vlmprep.serving.item_refs.UnknownItemReference: no item under uuid 'sku-1234' (unknown or expired): send its data again with this uuid

    ```
    """

    def __init__(
        self,
        max_bytes: int = DEFAULT_ITEM_REFERENCE_BYTES,
        max_entries: int = DEFAULT_ITEM_REFERENCE_ENTRIES,
        ttl_s: float = DEFAULT_ITEM_REFERENCE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        for name, value in (("max_bytes", max_bytes), ("max_entries", max_entries)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive int, got {value!r}")
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)) or not ttl_s > 0:
            raise ValueError(f"`ttl_s` must be a positive number, got {ttl_s!r}")
        self.max_bytes, self.max_entries, self.ttl_s = max_bytes, max_entries, float(ttl_s)
        self._clock = clock
        # Least recently used first: an item sent or named moves to the end, so the oldest use is always at the front
        self._entries: OrderedDict[tuple[Hashable | None, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._stats = ItemReferencesStats(max_bytes=max_bytes, max_entries=max_entries)

    @property
    def stats(self) -> ItemReferencesStats:
        """A snapshot of the counters."""
        with self._lock:
            self._expire(self._clock())
            return replace(self._stats, entries=len(self._entries))

    def remember(self, tenant: Hashable | None, uuid: str, part_type: str, payload: str | dict) -> bool:
        """Holds `payload` under the tenant's `uuid`, in place of what it held there (the latest data wins).

        Args:
            tenant (`Hashable`, *optional*): the request's tenant; `None` for none.
            uuid (`str`): the part's id.
            part_type (`str`): the part's type (a key of `ITEM_KINDS`).
            payload (`str | dict`): the part's media object (`MEDIA_FIELDS[part_type]`), as the request sent it: a
                string, or an object of plain values (strings, numbers, booleans, `None`).

        Returns:
            `bool`: whether it is held; `False` for an item over `max_bytes`, and then the id holds nothing (the
            older data is dropped too: it is no longer what the id names).
        """
        if part_type not in ITEM_KINDS:
            raise ValueError(f"not a media part type: {part_type!r}")
        size = len(uuid) + _payload_bytes(payload)
        payload = dict(payload) if isinstance(payload, dict) else payload  # the caller's object may change later
        key = (tenant, uuid)
        with self._lock:
            now = self._clock()
            self._expire(now)
            self._drop(key)
            if size > self.max_bytes:
                return False
            self._entries[key] = _Entry(part_type, payload, size, now)
            self._stats.bytes += size
            self._stats.remembered += 1
            while self._stats.bytes > self.max_bytes or len(self._entries) > self.max_entries:
                _, entry = self._entries.popitem(last=False)
                self._stats.bytes -= entry.bytes
                self._stats.evictions += 1
            return True

    def recall(self, tenant: Hashable | None, uuid: str, part_type: str) -> tuple[str, str | dict]:
        """The item the tenant last sent under `uuid`, for a part of `part_type` naming it.

        Args:
            tenant (`Hashable`, *optional*): the request's tenant; `None` for none.
            uuid (`str`): the id a part names.
            part_type (`str`): the naming part's type: its item must be of the same kind (`ITEM_KINDS`).

        Returns:
            `tuple[str, str | dict]`: the part type the item was sent with and its payload (a copy), as `remember`
            was given them.

        Raises:
            `UnknownItemReference`: nothing is held under the tenant's `uuid` (never sent, evicted or expired).
            `ItemReferenceMismatch`: the item is of another kind than `part_type`'s.
        """
        kind = ITEM_KINDS.get(part_type)
        if kind is None:
            raise ValueError(f"not a media part type: {part_type!r}")
        key = (tenant, uuid)
        with self._lock:
            now = self._clock()
            self._expire(now)
            entry = self._entries.get(key)
            if entry is None:
                self._stats.misses += 1
                raise UnknownItemReference(
                    f"no item under uuid {shorten(uuid, 60)!r} (unknown or expired): send its data again with this uuid"
                )
            if ITEM_KINDS[entry.part_type] != kind:
                self._stats.mismatches += 1
                raise _mismatch(uuid, entry.part_type, part_type)
            entry.used_at = now
            self._entries.move_to_end(key)
            self._stats.recalled += 1
            payload = entry.payload
            return entry.part_type, dict(payload) if isinstance(payload, dict) else payload

    def holds(self, tenant: Hashable | None, uuid: str) -> bool:
        """Whether an item is held under the tenant's `uuid` (its age and order unchanged).

        Args:
            tenant (`Hashable`, *optional*): the tenant.
            uuid (`str`): the id.

        Returns:
            `bool`
        """
        with self._lock:
            return (tenant, uuid) in self._entries

    def _drop(self, key: tuple) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._stats.bytes -= entry.bytes

    def _expire(self, now: float) -> None:
        """Drops the items last used `ttl_s` or more ago (under the lock): the front of the LRU order."""
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if now - entry.used_at < self.ttl_s:
                return
            self._drop(key)
            self._stats.expirations += 1


def _mismatch(uuid: str, stored_type: str, part_type: str) -> ItemReferenceMismatch:
    held, named = _KIND_NAMES[ITEM_KINDS[stored_type]], _KIND_NAMES[ITEM_KINDS[part_type]]
    return ItemReferenceMismatch(f"uuid {shorten(uuid, 60)!r} names {held}, not {named}")


def _payload_bytes(payload: Any) -> int:
    """The bytes `ItemReferences` counts for a payload: its strings' characters (4 each when not ASCII)."""
    if isinstance(payload, str):
        return _text_bytes(payload)
    if not isinstance(payload, dict):
        raise TypeError(f"a payload is a string or an object, got {type(payload).__name__}")
    size = 0
    for name, value in payload.items():
        if not (value is None or isinstance(value, (str, int, float))):
            # Held as sent: a nested object would be shared with the request, and uncounted
            raise TypeError(f"a payload object holds plain values only, got {type(value).__name__} in {name!r}")
        size += _text_bytes(str(name)) + (_text_bytes(value) if isinstance(value, str) else 8)
    return size


def _text_bytes(text: str) -> int:
    return len(text) if text.isascii() else 4 * len(text)


def resolve_item_references(
    messages: list[dict], tenant: Hashable | None, store: ItemReferenceStore | None
) -> list[dict]:
    """A checked request's messages with each part that names an item by `uuid` alone given that item's data.

    In the messages' order: a part with a `uuid` and data defines the id, for the later parts of this request and,
    once every reference of the request resolved, for later requests (`store.remember`); a part with a `uuid` and no
    data takes the data of the id's latest definition before it in this request, else the store's (`store.recall`);
    a part without a `uuid` is left as it is. `messages` is not changed: a resolved part is a new part (the type its
    item was sent with, that item's media object, the naming part's other fields) in a new message, and the messages
    and parts with nothing to resolve are the given objects.

    Args:
        messages (`list[dict]`): the `messages` of a request that passed `check_chat_request`.
        tenant (`Hashable`, *optional*): the request's tenant (the server's cache partition); `None` for none.
        store (`ItemReferenceStore`, *optional*): where ids are held (an `ItemReferences`); `None` when the server
            holds none: then only references to this request's own definitions resolve, and nothing is remembered.

    Returns:
        `list[dict]`: the messages to read the request's items from (`request_image_urls`, `request_audio_parts`).

    Raises:
        `fastapi.HTTPException`: 400 naming the message, the part and the id of the first reference that cannot be
        resolved (unknown, expired, or an item of another kind).
    """
    defined: dict[str, tuple[str, str | dict]] = {}  # this request's definitions, in order: the latest wins
    resolved = []
    for number, message in enumerate(messages, 1):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            resolved.append(message)
            continue
        parts = [
            _resolved_part(f"message {number}, part {part_number}", part, tenant, store, defined)
            for part_number, part in enumerate(content, 1)
        ]
        changed = any(new is not old for new, old in zip(parts, content, strict=True))
        resolved.append({**message, "content": parts} if changed else message)
    if store is not None:
        for uuid, (part_type, payload) in defined.items():
            store.remember(tenant, uuid, part_type, payload)
    return resolved


def _resolved_part(
    where: str, part: Any, tenant: Hashable | None, store: ItemReferenceStore | None, defined: dict
) -> Any:
    """One content part, with its item's data when it names the item by `uuid` alone; records a definition."""
    part_type = part.get("type") if isinstance(part, dict) else None
    uuid = part.get("uuid") if part_type in MEDIA_FIELDS else None
    if uuid is None:
        return part
    field = MEDIA_FIELDS[part_type]
    if part.get(field) is not None:
        defined.pop(uuid, None)  # re-inserted last: definitions are remembered in the order they were sent
        defined[uuid] = (part_type, part[field])
        return part
    try:
        if uuid in defined:
            stored_type, payload = defined[uuid]
            if ITEM_KINDS[stored_type] != ITEM_KINDS[part_type]:
                raise _mismatch(uuid, stored_type, part_type)
            payload = dict(payload) if isinstance(payload, dict) else payload  # two parts never share one object
        elif store is None:
            raise UnknownItemReference(
                f"this server holds no items by uuid ({shorten(uuid, 60)!r}): send the part's data with it"
            )
        else:
            stored_type, payload = store.recall(tenant, uuid, part_type)
    except (UnknownItemReference, ItemReferenceMismatch) as error:
        raise bad_request(f"{where}: {error}") from None
    named = {key: value for key, value in part.items() if key != field}
    return {**named, "type": stored_type, MEDIA_FIELDS[stored_type]: payload}
