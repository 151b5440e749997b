"""The items clients name by `uuid`, as the API server reaches them in the engine process (`EngineItemStore`): the
data crosses once; a reference to the version the API server holds crosses as the version alone."""

from __future__ import annotations

import asyncio
import threading

import pytest

from vlmprep.utils._compat import serving_unsupported_message

pytestmark = pytest.mark.skipif(serving_unsupported_message() is not None, reason=str(serving_unsupported_message()))

PHOTO = {"url": "data:image/png;base64," + "A" * 4096}


class _Engine:
    """An `EngineClient` whose requests run `EngineServices.call` as the engine's request loop would, counting the
    characters of data coming back."""

    model_id = "tiny"

    def __init__(self, services):
        self.services, self.returned_chars = services, 0

    async def _send_request(self, method: str, args: tuple):
        assert method == "vlmprep_call"
        name, call_args = args
        result = self.services.call(None, name, call_args)  # an error crosses as it is (`vlmprep_call`)
        if name == "recall" and isinstance(result[1], dict):
            self.returned_chars += len(result[1]["url"])
        return result


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join()


def _stores(loop, api_servers: int = 1):
    from vlmprep.serving.engine_items import EngineItemStore, ItemPayloadMemo
    from vlmprep.serving.policy import ServingPolicy
    from vlmprep.serving.runners import EngineServices

    engine = _Engine(EngineServices(ServingPolicy()))
    return engine, [EngineItemStore(engine, loop, ItemPayloadMemo()) for _ in range(api_servers)]


def test_a_reference_to_data_the_api_server_holds_carries_no_data(loop):
    engine, (store,) = _stores(loop)
    assert store.remember("alice", "photo", "image_url", PHOTO)
    for _ in range(3):
        assert store.recall("alice", "photo", "image_url") == ("image_url", PHOTO)
    assert engine.returned_chars == 0


def test_another_api_server_gets_the_data_once_and_new_data_under_an_id_replaces_it_everywhere(loop):
    engine, (first, second) = _stores(loop, api_servers=2)
    first.remember("alice", "photo", "image_url", PHOTO)
    assert second.recall("alice", "photo", "image_url") == ("image_url", PHOTO)
    assert second.recall("alice", "photo", "image_url") == ("image_url", PHOTO)
    assert engine.returned_chars == len(PHOTO["url"])  # once, for the second server
    newer = {"url": PHOTO["url"].replace("A", "B")}
    second.remember("alice", "photo", "image_url", newer)  # the latest data wins, whichever server sent it
    assert first.recall("alice", "photo", "image_url") == ("image_url", newer)


def test_another_tenant_and_an_unknown_id_get_nothing(loop):
    from vlmprep.serving.item_refs import UnknownItemReference

    _, (store,) = _stores(loop)
    store.remember("alice", "photo", "image_url", PHOTO)
    for tenant, uuid in (("bob", "photo"), ("alice", "other")):
        with pytest.raises(UnknownItemReference, match="unknown or expired"):
            store.recall(tenant, uuid, "image_url")
