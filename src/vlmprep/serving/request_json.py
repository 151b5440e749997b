"""A request's JSON body parsed as `json.loads` parses it, its long data URLs lifted out before the parse.

A chat app re-sends every earlier photo each turn as a base64 data URL of several megabytes; `json.loads` scans such a
string character by character (~2 ms per photo here), several times slower than finding its end with a byte search.
`parse_json_body` finds each long string value that starts with `data:` and holds only what base64 data URLs hold
(ASCII, no escapes, no control characters: then its text in the body is exactly its value), parses the body with each
such string replaced by a short marker, and puts the strings back in place of their markers. The value is the one
`json.loads` gives for the body: replacing a string's text by another text free of quotes, backslashes and control
characters changes no other token, so the body is valid JSON exactly when the replaced one is; a body whose replaced
form does not parse is parsed by `json.loads` itself, so its errors are the same too.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

__all__ = ["parse_json_body"]

# Strings shorter than this are left to `json.loads` (no gain in lifting them)
LIFT_MIN_CHARS = 64 * 1024
_START = b'"data:'


def parse_json_body(body: bytes) -> Any:
    """`json.loads(body)`, faster on bodies that carry long data URLs (see the module docstring).

    Args:
        body (`bytes`): the request body.

    Returns:
        `Any`: what `json.loads(body)` returns.

    Raises:
        `ValueError`: what `json.loads(body)` raises for it (`json.JSONDecodeError`, `UnicodeDecodeError`).
    """
    spans = _liftable_spans(body) if len(body) > LIFT_MIN_CHARS else []
    if not spans:
        return json.loads(body)
    # Unguessable, so no string of the client's can pass for one
    marker = "\x00vlmprep-lifted-" + os.urandom(12).hex() + "-"
    pieces, strings, offset = [], {}, 0
    for start, end in spans:  # [start, end) is the string's text, between its quotes
        name = f"{marker}{len(strings)}"
        try:
            strings[name] = str(memoryview(body)[start:end], "ascii")
        except UnicodeDecodeError:  # not ASCII: its JSON text may be UTF-8 or escapes; `json.loads` decides
            return json.loads(body)
        pieces += [body[offset:start], json.dumps(name)[1:-1].encode()]
        offset = end
    pieces.append(body[offset:])
    try:
        value = json.loads(b"".join(pieces))
    except ValueError:
        return json.loads(body)  # raises as for the body as sent
    try:
        return _put_back(value, strings)
    except RecursionError:  # nested deeper than this walk can go: `json.loads` itself decides
        return json.loads(body)


def _liftable_spans(body: bytes) -> list[tuple[int, int]]:
    spans, search = [], 0
    while (quote := body.find(_START, search)) != -1:
        start = quote + 1
        end = body.find(b'"', start)
        if end == -1:
            break
        search = end + 1
        if end - start < LIFT_MIN_CHARS or _escaped(body, quote) or _is_key(body, end + 1):
            continue
        if _plain_text(body, start, end):
            spans.append((start, end))
    return spans


def _plain_text(body: bytes, start: int, end: int) -> bool:
    # No backslashes and no control characters: its JSON text is its value (no escapes, nothing `json.loads`
    # refuses); whether it is ASCII, the decoding tells
    if body.find(b"\\", start, end) != -1:
        return False
    return bool(np.frombuffer(body, dtype=np.uint8, count=end - start, offset=start).min() >= 0x20)


def _escaped(body: bytes, quote: int) -> bool:
    # A quote after an odd run of backslashes is inside a string, not the start of one
    run = 0
    while quote - run - 1 >= 0 and body[quote - run - 1] == 0x5C:
        run += 1
    return run % 2 == 1


def _is_key(body: bytes, after: int) -> bool:
    while after < len(body) and body[after] in b" \t\r\n":
        after += 1
    return after < len(body) and body[after] == 0x3A  # ':'


def _put_back(value: Any, strings: dict[str, str]) -> Any:
    if isinstance(value, str):
        return strings.get(value, value)
    if isinstance(value, list):
        return [_put_back(item, strings) for item in value]
    if isinstance(value, dict):
        return {key: _put_back(item, strings) for key, item in value.items()}
    return value
