"""`parse_json_body` returns what `json.loads` returns (and raises what it raises) for every body, lifting long data
URLs out of the parse only where their text is their value."""

from __future__ import annotations

import base64
import json

import pytest

from vlmprep.serving import request_json
from vlmprep.serving.request_json import LIFT_MIN_CHARS, parse_json_body

PAYLOAD = base64.b64encode(bytes(range(256)) * (LIFT_MIN_CHARS // 128)).decode()
URL = "data:image/png;base64," + PAYLOAD


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


def test_the_app_reads_a_body_sent_in_many_chunks_whole():
    import asyncio

    from vlmprep.serving.app import build_app
    from vlmprep.serving.policy import ServingPolicy

    received = []

    class Handler:
        async def handle_request(self, body, request_id, request=None):
            from fastapi.responses import JSONResponse

            received.append(body)
            return JSONResponse({})

    class State:
        def is_cb_alive(self):
            return True

    app = build_app(None, Handler(), State(), ServingPolicy())
    body = json.dumps(chat(URL, URL)).encode()
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
    assert sent[0]["status"] == 200 and received == [json.loads(body)]
