"""`parse_json_body` returns what `json.loads` returns (and raises what it raises) for every body, lifting long data
URLs out of the parse only where their text is their value."""

from __future__ import annotations

import base64
import json

import pytest

from vlmprep.serving import request_json
from vlmprep.serving.body_texts import ResentBodyTexts
from vlmprep.serving.request_json import LIFT_MIN_CHARS, parse_json_body
from vlmprep.utils._compat import serving_unsupported_message

PAYLOAD = base64.b64encode(bytes(range(256)) * (LIFT_MIN_CHARS // 128)).decode()
URL = "data:image/png;base64," + PAYLOAD
# The app is built from transformers 5.24's server classes (transformers 5.25 rewrote them: `vlmprep serve` refuses it)
needs_served_transformers = pytest.mark.skipif(
    serving_unsupported_message() is not None, reason=str(serving_unsupported_message())
)


def chat(*urls: str) -> dict:
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return {"model": "m", "messages": [{"role": "user", "content": [*parts, {"type": "text", "text": "hi"}]}]}


def lifted_count(body: bytes) -> int:
    return len(request_json._liftable_spans(body))


def test_a_chat_with_re_sent_photos_parses_as_json_loads_and_lifts_them():
    body = json.dumps(chat(URL, URL[:-4] + "AAAA", URL)).encode()
    assert lifted_count(body) == 3
    value = parse_json_body(body)
    assert value == json.loads(body)
    assert type(value["messages"][0]["content"][0]["image_url"]["url"]) is str


@pytest.mark.parametrize(
    "body",
    [
        # Escapes inside the string (a client escaping "/" as "\/"), a control character, non-ASCII: json.loads parses
        json.dumps(chat(URL.replace("/", "\\/"))).replace("\\\\/", "\\/").encode(),
        json.dumps(chat(URL + "\\n")).encode(),
        json.dumps(chat(URL + "é"), ensure_ascii=False).encode(),
        # A data URL as a key, as text inside another string, after an escaped quote; short ones
        json.dumps({URL: 1, "text": 'say "' + URL + '"'}).encode(),
        json.dumps(chat("data:image/png;base64,AAAA")).encode(),
        # A UTF-8 BOM (json.loads takes it for bytes); whitespace between tokens, a data URL in a list
        b'\xef\xbb\xbf{"a": "' + URL.encode() + b'"}',
        b'{ "messages" :\n[ "' + URL.encode() + b'" ,\t"' + URL.encode() + b'" ] }',
    ],
    ids=["escaped-slash", "escaped-newline", "non-ascii", "key-and-inner-text", "short", "bom", "whitespace"],
)
def test_bodies_it_must_not_lift_or_lifts_parse_as_json_loads(body):
    assert parse_json_body(body) == json.loads(body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": "' + URL.encode() + b'"',  # unterminated object
        b'{"a": "' + URL.encode(),  # unterminated string
        b'{"a": "x\\\\"' + URL[1:].encode() + b'"}',  # a closing quote followed by text: invalid
        b'{"a": "' + URL.encode() + b'\x01"}',  # a control character: json.loads refuses it
        b'{"a": "' + URL.encode() + b'\xff"}',  # not UTF-8
    ],
    ids=["unterminated-object", "unterminated-string", "text-after-string", "control-character", "not-utf8"],
)
def test_invalid_bodies_raise_what_json_loads_raises(body):
    with pytest.raises(ValueError) as expected:
        json.loads(body)
    with pytest.raises(type(expected.value)) as actual:
        parse_json_body(body)
    assert str(actual.value) == str(expected.value)


def test_deep_nesting_is_left_to_json_loads():
    body = b'{"u": "' + URL.encode() + b'", "n": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    with pytest.raises(RecursionError):
        json.loads(body)
    with pytest.raises(RecursionError):
        parse_json_body(body)
    shallow = b'{"u": "' + URL.encode() + b'", "n": ' + b"[" * 200 + b"]" * 200 + b"}"
    assert parse_json_body(shallow) == json.loads(shallow)


def test_a_clients_string_cannot_pass_for_a_lifted_one():
    body = json.dumps({"u": URL, "fake": "\x00vlmprep-lifted-0", "also": "\x00vlmprep-lifted-"}).encode()
    assert parse_json_body(body) == json.loads(body)


def _post_through_app(app, body: bytes) -> list:
    import asyncio

    chunks = [body[start : start + 65536] for start in range(0, len(body), 65536)]
    sent = []

    async def receive():
        if chunks:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        await asyncio.sleep(60)
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "headers": [(b"content-type", b"application/json")],
        "query_string": b"",
        "scheme": "http",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 1),
        "http_version": "1.1",
        "root_path": "",
    }
    asyncio.run(app(scope, receive, send))
    return sent


class _RecordingHandler:
    def __init__(self, handler=None):
        self.received = []
        if handler is not None:  # the real handler's media cache and tenant reading
            self.media_cache, self.body_tenant = handler.media_cache, handler.body_tenant

    async def handle_request(self, body, request_id, request=None):
        from fastapi.responses import JSONResponse

        self.received.append(body)
        return JSONResponse({})


@needs_served_transformers
def test_the_app_reads_a_body_sent_in_many_chunks_whole():
    from vlmprep.serving.app import build_app
    from vlmprep.serving.policy import ServingPolicy

    handler = _RecordingHandler()
    body = json.dumps(chat(URL, URL)).encode()
    sent = _post_through_app(build_app(None, handler, ServingPolicy()), body)
    assert sent[0]["status"] == 200 and handler.received == [json.loads(body)]


@needs_served_transformers
def test_the_app_recalls_a_re_sent_data_url_per_tenant_as_the_string_the_media_cache_holds():
    from vlmprep.serving.app import build_app
    from vlmprep.serving.chat import VisionPrepChatCompletionHandler
    from vlmprep.serving.policy import ServingPolicy

    policy = ServingPolicy(api_key="secret")
    real = VisionPrepChatCompletionHandler(model_manager=None, generation_state=None, policy=policy)
    handler = _RecordingHandler(real)
    app = build_app(None, handler, policy)
    scope_headers = [(b"authorization", b"Bearer secret")]

    def post(body: dict) -> str:
        raw = json.dumps(body).encode()
        sent = _post_through_app(_with_headers(app, scope_headers), raw)
        assert sent[0]["status"] == 200 and handler.received[-1] == json.loads(raw)
        return handler.received[-1]["messages"][0]["content"][0]["image_url"]["url"]

    first = post({**chat(URL), "cache_salt": "alice"})
    assert post({**chat(URL), "cache_salt": "alice"}) is first
    assert post({**chat(URL), "cache_salt": "bob"}) is not first
    assert post({**chat(URL), "cache_salt": ["not", "a", "salt"]}) is not first
    assert post(chat(URL)) is not first
    stats = real.media_cache.stats
    assert stats.body_texts_recalled == 1 and stats.bytes == 3 * 2 * len(URL)


def _with_headers(app, headers: list):
    async def with_headers(scope, receive, send):
        return await app({**scope, "headers": [*scope["headers"], *headers]}, receive, send)

    return with_headers


def _tenant(value):
    # As the chat handler reads it: a body's `cache_salt`, `None` (neither recalled nor remembered) when not a string
    salt = value.get("cache_salt") if isinstance(value, dict) else None
    return None if salt is not None and not isinstance(salt, str) else (salt,)


def test_a_re_sent_data_url_is_recalled_as_the_very_string_parsed_before_for_its_tenant_only():
    texts = ResentBodyTexts(max_bytes=2**24)
    other = URL[:-8] + "BBBBBBBB"
    first = parse_json_body(json.dumps(chat(URL)).encode(), texts, _tenant)
    first_url = first["messages"][0]["content"][0]["image_url"]["url"]
    body = json.dumps(chat(other, URL)).encode()
    again = parse_json_body(body, texts, _tenant)
    assert again == json.loads(body) and texts.recalled == 1
    assert again["messages"][0]["content"][1]["image_url"]["url"] is first_url
    # Another tenant's body, one with no readable tenant, or no memory at all: decoded afresh, the same value
    for salt in ("bob", 3):
        body = json.dumps({**chat(URL), "cache_salt": salt}).encode()
        value = parse_json_body(body, texts, _tenant)
        assert value == json.loads(body) and value["messages"][0]["content"][0]["image_url"]["url"] is not first_url
    assert parse_json_body(json.dumps(chat(URL)).encode())["messages"][0]["content"][0]["image_url"]["url"] is not (
        first_url
    )
    assert texts.recalled == 1
    # "bob"'s string is his own from now on; the unreadable tenant's was never remembered
    parse_json_body(json.dumps({**chat(URL), "cache_salt": "bob"}).encode(), texts, _tenant)
    assert texts.recalled == 2 and texts.bytes == 2 * 2 * len(URL) + 2 * len(other)


@pytest.mark.parametrize(
    "body",
    [
        # One byte changed in the middle (same length, same sampled windows as the remembered URL)
        json.dumps(chat(URL[: len(URL) // 2 - 100] + "!" + URL[len(URL) // 2 - 99 :])).encode(),
        # The remembered bytes, then an escape or a control character: not the remembered string
        json.dumps(chat(URL + "\\n")).encode(),
        b'{"a": "' + URL.encode() + b'\x01"}',
        # The remembered bytes as a key, and inside another string
        json.dumps({URL: 1, "text": 'say "' + URL + '"'}).encode(),
    ],
    ids=["changed-middle", "escape-after", "control-after", "key-and-inner-text"],
)
def test_bytes_that_only_resemble_a_remembered_string_parse_as_json_loads(body):
    texts = ResentBodyTexts(max_bytes=2**24)
    parse_json_body(json.dumps(chat(URL)).encode(), texts, _tenant)
    try:
        expected = json.loads(body)
    except ValueError as error:
        with pytest.raises(type(error)):
            parse_json_body(body, texts, _tenant)
        return
    assert parse_json_body(body, texts, _tenant) == expected and texts.recalled == 0


def test_remembered_body_texts_stay_within_their_bytes():
    texts = ResentBodyTexts(max_bytes=5 * len(URL))  # two strings: each counts its bytes and its text
    urls = [URL[:-4] + f"{index:04d}" for index in range(4)]
    for url in urls:
        parse_json_body(json.dumps(chat(url)).encode(), texts, _tenant)
    assert texts.bytes == 4 * len(URL)
    recalled = [parse_json_body(json.dumps(chat(url)).encode(), texts, _tenant) for url in urls[2:]]
    assert texts.recalled == 2 and recalled[0] == chat(urls[2])
    parse_json_body(json.dumps(chat(urls[0])).encode(), texts, _tenant)
    assert texts.recalled == 2  # evicted
    huge = ResentBodyTexts(max_bytes=len(URL))  # one string over the budget: never held
    parse_json_body(json.dumps(chat(URL)).encode(), huge, _tenant)
    assert huge.bytes == 0
