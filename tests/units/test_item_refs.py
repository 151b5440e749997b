"""Items sent once and named by their part's `uuid` afterwards (`vlmprep.serving.item_refs`), and the request checks
that accept such parts: per tenant, bounded (bytes, entries, time), of one kind, and every miss a short 400."""

from __future__ import annotations

import copy
import pickle
import threading

import pytest
from fastapi import HTTPException

from vlmprep.serving.item_refs import (
    ItemReferenceMismatch,
    ItemReferences,
    UnknownItemReference,
    resolve_item_references,
)
from vlmprep.serving.policy import ServingPolicy
from vlmprep.serving.request_checks import (
    MAX_ITEM_UUID_CHARS,
    check_chat_request,
    is_item_reference,
    request_audio_parts,
    request_image_urls,
)

PNG = "data:image/png;base64," + "iVBORw0K" * 64
WAV = "UklGRiQAAABXQVZF" * 16
FIELDS = {"model", "messages", "max_tokens"}


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def image(uuid: str | None = None, url: str | None = PNG) -> dict:
    part = {"type": "image_url", "image_url": None if url is None else {"url": url}}
    if uuid is not None:
        part["uuid"] = uuid
    return part


def audio(uuid: str | None = None, data: str | None = WAV) -> dict:
    part = {"type": "input_audio", "input_audio": None if data is None else {"data": data, "format": "wav"}}
    if uuid is not None:
        part["uuid"] = uuid
    return part


def user(*parts: dict) -> dict:
    return {"role": "user", "content": [*parts, {"type": "text", "text": "what is it?"}]}


def refused(call) -> str:
    with pytest.raises(HTTPException) as caught:
        call()
    assert caught.value.status_code == 400
    return caught.value.detail


# The store


def test_a_tenant_reaches_its_own_items_only():
    store = ItemReferences()
    store.remember("a", "sku-1", "image_url", {"url": PNG})
    store.remember(None, "sku-2", "image_url", {"url": PNG + "A"})
    assert store.recall("a", "sku-1", "image_url") == ("image_url", {"url": PNG})
    for tenant, uuid in (("b", "sku-1"), (None, "sku-1"), ("a", "sku-2"), (("a",), "sku-1")):
        with pytest.raises(UnknownItemReference, match="unknown or expired"):
            store.recall(tenant, uuid, "image_url")
    # The same id under two tenants: two items
    store.remember("b", "sku-1", "image_url", {"url": "data:image/png;base64,Qk0="})
    assert store.recall("a", "sku-1", "image_url")[1] == {"url": PNG}
    assert store.recall("b", "sku-1", "image_url")[1] == {"url": "data:image/png;base64,Qk0="}


def test_the_latest_data_under_an_id_wins():
    store = ItemReferences()
    store.remember("a", "photo", "image_url", {"url": PNG})
    store.remember("a", "photo", "input_image", "data:image/png;base64,Qk0=")
    assert store.recall("a", "photo", "image_url") == ("input_image", "data:image/png;base64,Qk0=")
    assert store.stats.entries == 1
    assert store.stats.bytes == len("photo") + len("data:image/png;base64,Qk0=")


def test_an_item_over_the_budget_is_not_held_and_drops_the_older_data():
    store = ItemReferences(max_bytes=1000)
    assert store.remember("a", "photo", "input_image", "data:image/png;base64,Qk0=")
    assert not store.remember("a", "photo", "input_image", "x" * 1000)
    with pytest.raises(UnknownItemReference):  # the id no longer names the old bytes
        store.recall("a", "photo", "input_image")
    assert store.stats.bytes == 0


def test_bytes_bound_evicts_the_least_recently_used():
    store = ItemReferences(max_bytes=300)
    for uuid in "abc":
        store.remember("t", uuid, "input_image", "x" * 99)  # 100 bytes with its one-character id
    store.recall("t", "a", "input_image")  # "b" is now the least recently used
    store.remember("t", "d", "input_image", "y" * 99)
    with pytest.raises(UnknownItemReference):
        store.recall("t", "b", "input_image")
    for uuid in "acd":
        store.recall("t", uuid, "input_image")
    stats = store.stats
    assert (stats.entries, stats.bytes, stats.evictions, stats.max_bytes) == (3, 300, 1, 300)


def test_non_ascii_text_counts_four_bytes_a_character():
    store = ItemReferences(max_bytes=1000)
    store.remember("t", "u", "audio_url", {"url": "é" * 10})
    assert store.stats.bytes == len("u") + len("url") + 40


def test_entry_bound_evicts_the_least_recently_used():
    store = ItemReferences(max_entries=2)
    store.remember("t", "a", "input_image", "data:,a")
    store.remember("u", "b", "input_image", "data:,b")
    store.recall("t", "a", "input_image")
    store.remember("t", "c", "input_image", "data:,c")  # evicts "b", another tenant's: the bound is the server's
    with pytest.raises(UnknownItemReference):
        store.recall("u", "b", "input_image")
    assert store.recall("t", "a", "input_image")[1] == "data:,a"
    assert store.recall("t", "c", "input_image")[1] == "data:,c"
    assert (store.stats.entries, store.stats.evictions) == (2, 1)


def test_items_expire_ttl_after_their_last_use():
    clock = FakeClock()
    store = ItemReferences(ttl_s=60, clock=clock)
    store.remember("t", "old", "input_image", "data:,old")
    store.remember("t", "used", "input_image", "data:,used")
    clock.now += 50
    store.recall("t", "used", "input_image")  # named again: held 60 s from now
    clock.now += 20
    with pytest.raises(UnknownItemReference, match="send its data again with this uuid"):
        store.recall("t", "old", "input_image")
    assert store.recall("t", "used", "input_image")[1] == "data:,used"
    clock.now += 60
    stats = store.stats
    assert (stats.entries, stats.bytes, stats.expirations, stats.misses) == (0, 0, 2, 1)
    # Sent again: held again
    store.remember("t", "old", "input_image", "data:,old")
    assert store.recall("t", "old", "input_image")[1] == "data:,old"


def test_an_id_names_items_of_one_kind():
    store = ItemReferences()
    store.remember("t", "clip", "input_audio", {"data": WAV, "format": "wav"})
    with pytest.raises(ItemReferenceMismatch, match="names an audio clip, not an image"):
        store.recall("t", "clip", "image_url")
    with pytest.raises(ItemReferenceMismatch, match="names an audio clip, not a video"):
        store.recall("t", "clip", "video_url")
    # Another part type of the same kind gets the item as it was sent
    assert store.recall("t", "clip", "audio_url") == ("input_audio", {"data": WAV, "format": "wav"})
    assert (store.stats.mismatches, store.stats.recalled) == (2, 1)


def test_the_store_holds_copies_and_hands_out_copies():
    store = ItemReferences()
    payload = {"url": PNG}
    store.remember("t", "p", "image_url", payload)
    payload["url"] = "changed"
    recalled = store.recall("t", "p", "image_url")[1]
    recalled["url"] = "changed too"
    assert store.recall("t", "p", "image_url")[1] == {"url": PNG}


def test_store_data_is_plain_and_picklable():
    store = ItemReferences()
    store.remember(("key:abc", "salt:s"), "p", "image_url", {"url": PNG, "detail": "high"})
    recalled = store.recall(("key:abc", "salt:s"), "p", "image_url")
    assert pickle.loads(pickle.dumps(recalled)) == recalled
    with pytest.raises(UnknownItemReference) as caught:
        store.recall("t", "missing", "image_url")
    assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)
    with pytest.raises(TypeError):
        store.remember("t", "nested", "image_url", {"url": {"deep": PNG}})
    with pytest.raises(ValueError):
        store.remember("t", "p", "text", "hello")


def test_bad_bounds_are_refused():
    for kwargs in ({"max_bytes": 0}, {"max_entries": True}, {"ttl_s": 0}, {"ttl_s": "1"}):
        with pytest.raises(ValueError):
            ItemReferences(**kwargs)


def test_concurrent_use_keeps_the_books():
    store = ItemReferences(max_bytes=50_000, max_entries=64)
    errors = []

    def work(tenant: int):
        try:
            for step in range(300):
                uuid = f"item-{step % 80}"
                store.remember(tenant, uuid, "input_image", f"data:,{tenant}-{step}" + "x" * 200)
                try:
                    kind, payload = store.recall(tenant, f"item-{(step * 7) % 80}", "image_url")
                    assert kind == "input_image" and payload.startswith(f"data:,{tenant}-")
                except UnknownItemReference:
                    pass
        except Exception as error:  # reported below: an assertion in a thread is not seen by pytest
            errors.append(error)

    threads = [threading.Thread(target=work, args=(tenant,)) for tenant in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    stats = store.stats
    assert stats.entries <= 64 and stats.bytes <= 50_000
    held = sum(len(key[1]) + len(entry.payload) for key, entry in store._entries.items())
    assert stats.bytes == held
    assert stats.remembered == 6 * 300 and stats.recalled + stats.misses == 6 * 300


# Resolving a request's references


def test_a_reference_takes_the_data_sent_in_an_earlier_request():
    store = ItemReferences()
    first = [user(image("sku-1"), audio("clip"))]
    assert resolve_item_references(first, "t", store) == first
    later = [user(image("sku-1", url=None), audio("clip", data=None))]
    resolved = resolve_item_references(later, "t", store)
    assert resolved == [user(image("sku-1"), audio("clip"))]
    assert request_image_urls(resolved) == [PNG]
    assert request_audio_parts(resolved) == [audio("clip")]


def test_a_reference_without_its_field_is_resolved_too():
    store = ItemReferences()
    store.remember("t", "p", "input_image", "data:,p")
    resolved = resolve_item_references([user({"type": "input_image", "uuid": "p"})], "t", store)
    assert resolved[0]["content"][0] == {"type": "input_image", "uuid": "p", "image_url": "data:,p"}


def test_a_reference_becomes_a_part_of_the_type_its_item_was_sent_as():
    store = ItemReferences()
    store.remember("t", "clip", "input_audio", {"data": WAV, "format": "wav"})
    part = {"type": "audio_url", "audio_url": None, "uuid": "clip", "extra": 1}
    resolved = resolve_item_references([user(part)], "t", store)[0]["content"][0]
    assert resolved == {
        "type": "input_audio",
        "input_audio": {"data": WAV, "format": "wav"},
        "uuid": "clip",
        "extra": 1,
    }


def test_an_id_defined_earlier_in_the_request_resolves_later_parts():
    store = ItemReferences()
    messages = [
        user(image("a", url=PNG)),
        {"role": "assistant", "content": "a cat"},
        user(image("a", url=None), image("a", url="data:,new"), image("a", url=None)),
    ]
    resolved = resolve_item_references(messages, "t", store)
    urls = request_image_urls(resolved)
    assert urls == [PNG, PNG, "data:,new", "data:,new"]
    # The request's latest definition is what later requests get
    assert store.recall("t", "a", "image_url")[1] == {"url": "data:,new"}
    assert store.stats.remembered == 1


def test_a_reference_before_its_definition_takes_the_stored_data():
    store = ItemReferences()
    store.remember("t", "a", "image_url", {"url": "data:,old"})
    resolved = resolve_item_references([user(image("a", url=None), image("a", url="data:,new"))], "t", store)
    assert request_image_urls(resolved) == ["data:,old", "data:,new"]


def test_an_unknown_id_is_a_400_naming_the_part_and_the_id():
    store = ItemReferences()
    messages = [user(image("known")), user({"type": "text", "text": "and"}, image("x" * MAX_ITEM_UUID_CHARS, None))]
    detail = refused(lambda: resolve_item_references(messages, "t", store))
    assert detail.startswith("message 2, part 2: no item under uuid 'xxxxxxxx")
    assert "unknown or expired" in detail and "send its data again with this uuid" in detail
    assert len(detail) < 200  # the id is shortened
    # A refused request remembers nothing of its own
    with pytest.raises(UnknownItemReference):
        store.recall("t", "known", "image_url")


def test_another_tenants_id_is_unknown():
    store = ItemReferences()
    resolve_item_references([user(image("sku-1"))], "a", store)
    detail = refused(lambda: resolve_item_references([user(image("sku-1", url=None))], "b", store))
    assert "no item under uuid 'sku-1' (unknown or expired)" in detail


def test_a_reference_of_another_kind_is_a_400():
    store = ItemReferences()
    detail = refused(lambda: resolve_item_references([user(audio("x"), image("x", url=None))], "t", store))
    assert detail == "message 1, part 2: uuid 'x' names an audio clip, not an image"
    store.remember("t", "y", "image_url", {"url": PNG})
    detail = refused(lambda: resolve_item_references([user(audio("y", data=None))], "t", store))
    assert detail == "message 1, part 1: uuid 'y' names an image, not an audio clip"


def test_without_a_store_only_the_request_own_definitions_resolve():
    messages = [user(image("a"), image("a", url=None))]
    assert request_image_urls(resolve_item_references(messages, None, None)) == [PNG, PNG]
    detail = refused(lambda: resolve_item_references([user(image("a", url=None))], None, None))
    assert "holds no items by uuid" in detail


def test_resolving_changes_nothing_it_was_given():
    store = ItemReferences()
    store.remember("t", "a", "image_url", {"url": PNG})
    messages = [
        {"role": "system", "content": "be brief"},
        user(image(), image("a", url=None)),
        user(image("b")),
    ]
    before = copy.deepcopy(messages)
    resolved = resolve_item_references(messages, "t", store)
    assert messages == before
    assert resolved[0] is messages[0] and resolved[2] is messages[2]  # nothing to resolve: the same objects
    assert resolved[1] is not messages[1] and resolved[1]["content"][0] is messages[1]["content"][0]
    resolved[1]["content"][1]["image_url"]["url"] = "changed"
    assert store.recall("t", "a", "image_url")[1] == {"url": PNG}


# The request checks


def checked(*parts: dict, item_references: bool = True, policy: ServingPolicy | None = None) -> None:
    body = {"model": "m", "messages": [user(*parts)]}
    check_chat_request(body, policy or ServingPolicy(), FIELDS, item_references=item_references)


def test_checks_accept_uuids_and_references():
    checked(image("sku-1"), audio("clip"), {"type": "audio_url", "audio_url": {"url": "data:,a"}, "uuid": "c2"})
    checked(image("sku-1", url=None), audio("clip", data=None), {"type": "input_image", "uuid": "p"})
    checked({"type": "audio_url", "uuid": "c"}, {"type": "input_image", "image_url": "data:,p", "uuid": "p"})
    checked(image(None), {"type": "image_url", "image_url": {"url": PNG}, "uuid": None})  # `null`: no uuid
    checked(image("x" * MAX_ITEM_UUID_CHARS, url=None))


def test_checks_refuse_bad_uuids_and_parts():
    cases = {
        "`uuid` must be a non-empty string": image(""),
        "`uuid` must be a non-empty": image("x" * (MAX_ITEM_UUID_CHARS + 1), url=None),
        "of at most 256 characters": {**image(), "uuid": 5},
        "`image_url` must be a string, an object of plain values, or null": {**image("a"), "image_url": [PNG]},
        "`input_audio` must be a string, an object of plain values": {
            **audio("a"),
            "input_audio": {"data": {"nested": WAV}},
        },
        # With a uuid and data, the data is checked as ever
        "`image_url` must be a string or an object with a string `url`": image("a", url=None) | {"image_url": {}},
        "`input_audio` must be an object with base64 `data`": {**audio("a"), "input_audio": "UklG"},
        # Without a uuid, the data is needed as ever
        "`image_url` must be a string or an object": image(None, url=None),
        "`audio_url` must be an object with a string `url`": {"type": "audio_url"},
        # Videos stay refused, with or without a uuid
        "`video_url` parts are not accepted": {"type": "video_url", "video_url": None, "uuid": "v"},
    }
    for message, part in cases.items():
        detail = refused(lambda part=part: checked(part))
        assert message in detail, (message, detail)
        assert detail.startswith("message 1, part 1: ")


def test_checks_refuse_references_where_the_server_resolves_none():
    detail = refused(lambda: checked(image("a", url=None), item_references=False))
    assert detail == "message 1, part 1: this server takes no item by `uuid` alone: send `image_url` with it"
    checked(image("a"), audio("b"), item_references=False)  # a uuid with its data: accepted, and nothing more


def test_references_count_towards_the_request_limits():
    policy = ServingPolicy(max_images_per_request=2, max_audio_per_request=1)
    checked(image("a"), image("a", url=None), audio("c", data=None), policy=policy)
    assert "3 images in the request" in refused(
        lambda: checked(image("a"), *[image("a", url=None)] * 2, policy=policy)
    )
    assert "2 audio clips" in refused(lambda: checked(audio("c"), audio("c", data=None), policy=policy))


def test_unresolved_references_are_not_read_as_items():
    assert is_item_reference(image("a", url=None)) and is_item_reference({"type": "audio_url", "uuid": "c"})
    assert not is_item_reference(image("a")) and not is_item_reference(image(None))
    assert not is_item_reference({"type": "text", "text": "hi", "uuid": "t"})
    with pytest.raises(ValueError, match="call `resolve_item_references`"):
        request_image_urls([user(image(), image("a", url=None))])
    with pytest.raises(ValueError, match="call `resolve_item_references`"):
        request_audio_parts([user(audio("c", data=None))])
    assert request_image_urls([user(image("a"), {"type": "input_image", "image_url": "data:,p"})]) == [PNG, "data:,p"]
