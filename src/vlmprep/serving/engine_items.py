"""The API server's side of the items clients name by `uuid`: the store lives in the model's engine process.

With `--api-server-count N`, a chat's turns reach whichever API server the kernel hands the connection to; an id a
client defined through one must resolve through another. The `ItemReferences` store therefore lives beside the
model, in its engine process (`vlmprep.serving.runners.EngineServices`), and `EngineItemStore` reaches it through the
model's `EngineClient` (a `vlmprep_call` request, answered at once by the engine's request loop, never behind a
generation). The part's data crosses once, when it is sent: each API server keeps what it sent or got last in an
`ItemPayloadMemo`, and the engine answers a reference to data of the version the API server holds with the version
alone (a reference costs a short round trip, not a photo's megabytes, and the resolved part is the very string the
media cache saw before, recognized at once).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

__all__ = ["DEFAULT_MEMO_BYTES", "ENGINE_CALL_TIMEOUT_S", "EngineItemStore", "ItemPayloadMemo", "has_item_uuids"]

# How long a worker thread waits for the engine process to remember or recall an item.
ENGINE_CALL_TIMEOUT_S = 30.0
# What an API server keeps of the items' data it sent or got (each kept at most once more by the media cache's texts).
DEFAULT_MEMO_BYTES = 128 * 1024 * 1024


def has_item_uuids(messages: Any) -> bool:
    """Whether any content part of checked `messages` carries a `uuid`.

    Args:
        messages (`list[dict]`): the request's messages (after `check_chat_request`).

    Returns:
        `bool`
    """
    return any(
        isinstance(part, dict) and "uuid" in part
        for message in messages
        for part in (message.get("content") if isinstance(message.get("content"), list) else ())
    )


class ItemPayloadMemo:
    """The items' data an API server sent to or got from engine processes, by model, tenant and id, with the version
    the engine gave it; least recently used dropped beyond `max_bytes` (thread-safe).

    Args:
        max_bytes (`int`, *optional*, defaults to `DEFAULT_MEMO_BYTES`): the most characters of data held.
    """

    def __init__(self, max_bytes: int = DEFAULT_MEMO_BYTES):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._held: OrderedDict[tuple, tuple[int, str, Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> tuple[int, str, Any] | None:
        """`(version, part_type, payload)` held under `key`, or `None`."""
        with self._lock:
            held = self._held.get(key)
            if held is None:
                return None
            self._held.move_to_end(key)
            return held[:3]

    def put(self, key: tuple, version: int | None, part_type: str, payload: Any) -> None:
        """Holds `payload` of `version` under `key` (`version` `None`: forgets `key`)."""
        size = _size(payload)
        with self._lock:
            previous = self._held.pop(key, None)
            if previous is not None:
                self.bytes -= previous[3]
            if version is None or size > self.max_bytes:
                return
            self._held[key] = (version, part_type, payload, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, dropped = self._held.popitem(last=False)
                self.bytes -= dropped[3]


def _size(payload: Any) -> int:
    values = payload.values() if isinstance(payload, dict) else [payload]
    return sum(len(value) for value in values if isinstance(value, str))


class EngineItemStore:
    """An `ItemReferenceStore` whose entries live in a model's engine process, called from a worker thread.

    Args:
        engine (`EngineClient`): the model's client.
        loop (`asyncio.AbstractEventLoop`): the event loop the client's requests run on.
        memo (`ItemPayloadMemo`, *optional*): the API server's copies of the data (none: every reference carries it).
    """

    def __init__(self, engine: Any, loop: asyncio.AbstractEventLoop, memo: ItemPayloadMemo | None = None):
        self._engine, self._loop, self._memo = engine, loop, memo

    def remember(self, tenant: Hashable | None, uuid: str, part_type: str, payload: Any) -> bool:
        """`ItemReferences.remember`, in the engine process."""
        kept, version = self._call("remember", tenant, uuid, part_type, payload)
        if self._memo is not None:
            self._memo.put((self._engine.model_id, tenant, uuid), version, part_type, payload)
        return kept

    def recall(self, tenant: Hashable | None, uuid: str, part_type: str) -> tuple[str, Any]:
        """`ItemReferences.recall`, in the engine process; raises what it raises (an unknown id, another kind). The
        data comes from the memo when the engine holds the version it has."""
        key = (self._engine.model_id, tenant, uuid)
        known = self._memo.get(key) if self._memo is not None else None
        stored_type, payload, version = self._call("recall", tenant, uuid, part_type, known[0] if known else None)
        if payload is None and known is not None:  # the engine holds the very version this server has
            return stored_type, known[2]
        if self._memo is not None:
            self._memo.put(key, version, stored_type, payload)
        return stored_type, payload

    def _call(self, name: str, *args: Any) -> Any:
        request = self._engine._send_request("vlmprep_call", args=(name, args))
        return asyncio.run_coroutine_threadsafe(request, self._loop).result(ENGINE_CALL_TIMEOUT_S)
