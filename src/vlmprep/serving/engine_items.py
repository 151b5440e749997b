"""The API server's side of the items clients name by `uuid`: the store lives in the model's engine process.

With `--api-server-count N`, a chat's turns reach whichever API server the kernel hands the connection to; an id a
client defined through one must resolve through another. The `ItemReferences` store therefore lives beside the
model, in its engine process (`vlmprep.serving.runners.EngineServices`), and `EngineItemStore` reaches it through the
model's `EngineClient` (a `vlmprep_call` request, answered at once by the engine's request loop, never behind a
generation). What crosses is the part's data, once when it is sent and once per later reference: a local pipe, not
the client's network.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

__all__ = ["ENGINE_CALL_TIMEOUT_S", "EngineItemStore", "has_item_uuids"]

# How long a worker thread waits for the engine process to remember or recall an item.
ENGINE_CALL_TIMEOUT_S = 30.0


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


class EngineItemStore:
    """An `ItemReferenceStore` whose entries live in a model's engine process, called from a worker thread.

    Args:
        engine (`EngineClient`): the model's client.
        loop (`asyncio.AbstractEventLoop`): the event loop the client's requests run on.
    """

    def __init__(self, engine: Any, loop: asyncio.AbstractEventLoop):
        self._engine, self._loop = engine, loop

    def remember(self, tenant: Hashable | None, uuid: str, part_type: str, payload: Any) -> Any:
        """`ItemReferences.remember`, in the engine process."""
        return self._call("remember", tenant, uuid, part_type, payload)

    def recall(self, tenant: Hashable | None, uuid: str, part_type: str) -> Any:
        """`ItemReferences.recall`, in the engine process; raises what it raises (an unknown id, another kind)."""
        return self._call("recall", tenant, uuid, part_type)

    def _call(self, name: str, *args: Any) -> Any:
        request = self._engine._send_request("vlmprep_call", args=(name, args))
        return asyncio.run_coroutine_threadsafe(request, self._loop).result(ENGINE_CALL_TIMEOUT_S)
