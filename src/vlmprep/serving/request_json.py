"""A request's JSON body parsed as `json.loads` parses it, its long data URLs lifted out before the parse.

A chat app re-sends every earlier photo each turn as a base64 data URL of several megabytes; `json.loads` scans such a
string character by character (~2 ms per photo here), several times slower than finding its end with a byte search.
`parse_json_body` finds each long string value that starts with `data:` and holds only what base64 data URLs hold
(ASCII, no escapes, no control characters: then its text in the body is exactly its value), parses the body with each
such string replaced by a short marker, and puts the strings back in place of their markers. The value is the one
`json.loads` gives for the body: replacing a string's text by another text free of quotes, backslashes and control
characters changes no other token, so the body is valid JSON exactly when the replaced one is; a body whose replaced
form does not parse is parsed by `json.loads` itself, so its errors are the same too.

With a `ResentBodyTexts` and a way to read the body's tenant from its parsed skeleton (`namespace`), a string whose
bytes equal those of one lifted from an earlier body of the same tenant is not scanned or decoded again: the
remembered `str` object is put in its place (the same value: the same bytes). That is why each string's checks come
after the skeleton is parsed; a string failing them sends the whole body to `json.loads`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .body_texts import ResentBodyTexts

__all__ = ["parse_json_body"]

# Strings shorter than this are left to `json.loads` (no gain in lifting them)
LIFT_MIN_CHARS = 64 * 1024
_START = b'"data:'


def parse_json_body(
    body: bytes,
    texts: ResentBodyTexts | None = None,
    namespace: Callable[[Any], Hashable | None] | None = None,
) -> Any:
    """`json.loads(body)`, faster on bodies that carry long data URLs (see the module docstring).

    Args:
        body (`bytes`): the request body.
        texts (`ResentBodyTexts`, *optional*): recent long strings, recalled from their bytes instead of decoded.
        namespace (`Callable[[Any], Hashable | None]`, *optional*): the tenant of a body, from its value with each
            long string replaced by a marker; `None` for a body whose strings must be neither recalled nor remembered
            (one the server will refuse). Needed with `texts`.

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
    names = [f"{marker}{index}" for index in range(len(spans))]
    pieces, offset = [], 0
    for (start, end), name in zip(spans, names, strict=True):  # [start, end) is the string's text, between its quotes
        pieces += [body[offset:start], json.dumps(name)[1:-1].encode()]
        offset = end
    pieces.append(body[offset:])
    try:
        value = json.loads(b"".join(pieces))
    except ValueError:
        return json.loads(body)  # raises as for the body as sent
    tenant = namespace(value) if texts is not None and namespace is not None else None
    strings = {}
    for (start, end), name in zip(spans, names, strict=True):
        text = texts.recall(body, start, end, tenant) if tenant is not None else None
        if text is None:
            text = _plain_ascii(body, start, end)
            if text is None:  # escapes, control characters or not ASCII: `json.loads` decides what it is
                return json.loads(body)
            if tenant is not None:
                texts.remember(body, start, end, text, tenant)
        strings[name] = text
    try:
        return _put_back(value, strings)
    except RecursionError:  # nested deeper than this walk can go: `json.loads` itself decides
        return json.loads(body)


def _liftable_spans(body: bytes) -> list[tuple[int, int]]:
    # Candidates: long strings starting with "data:" that are values; their text is checked once the body's tenant
    # is known (`_plain_ascii`), unless recalled
    spans, search = [], 0
    while (quote := body.find(_START, search)) != -1:
        start = quote + 1
        end = body.find(b'"', start)
        if end == -1:
            break
        search = end + 1
        if end - start < LIFT_MIN_CHARS or _escaped(body, quote) or _is_key(body, end + 1):
            continue
        spans.append((start, end))
    return spans


def _plain_ascii(body: bytes, start: int, end: int) -> str | None:
    # The string's value when its JSON text is its value (no escapes, nothing `json.loads` refuses, ASCII)
    if not _plain_text(body, start, end):
        return None
    try:
        return str(memoryview(body)[start:end], "ascii")
    except UnicodeDecodeError:  # its JSON text may be UTF-8
        return None


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
