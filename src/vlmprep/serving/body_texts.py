"""Long strings of request bodies recognized by their bytes: a re-sent photo's data URL is not checked or decoded again.

A chat app re-sends every earlier photo as the same multi-megabyte data URL each turn. `parse_json_body` lifts such a
string out of the JSON parse, but still scans it for escapes and control characters and decodes it into a new `str`,
which the media cache then compares, character by character, with the text it remembers (`TextKeyMemo`).
`ResentBodyTexts` remembers recent lifted strings together with their bytes as a body held them: a body holding the
same bytes in a string's place gets the remembered `str` object back after one memory comparison, and the media cache,
holding that very object, recognizes it by identity.

Exact: the string handed back is the one decoding would give (the same bytes, and such a string's bytes are its ASCII
text). Per tenant: a body's strings are only compared with strings remembered under the same namespace (its tenant,
read from the body's parsed skeleton before any string is compared), so one tenant cannot learn by timing which photos
another sent. Bounded in bytes (each string counts twice: its bytes and its text), least recently used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["ResentBodyTexts"]

# Bytes per sampled window of the probe: enough to tell most different photos of one length apart, cheap to copy
_WINDOW = 64


class ResentBodyTexts:
    """Recent long strings of request bodies, recalled from a body's bytes (see the module docstring).

    Thread-safe.

    Args:
        max_bytes (`int`): budget for the strings held, each counted twice (its bytes and its text).

    Example:

    ```python
    >>> from vlmprep.serving.body_texts import ResentBodyTexts
    >>> texts = ResentBodyTexts(max_bytes=2**20)
    >>> body = b'{"url": "data:image/png;base64,iVBORw0K"}'
    >>> text = body[9:39].decode("ascii")
    >>> texts.remember(body, 9, 39, text, namespace="tenant")
    >>> texts.recall(b'{"u": "data:image/png;base64,iVBORw0K"}', 7, 37, namespace="tenant") is text
    True
    >>> texts.recall(b'{"u": "data:image/png;base64,iVBORw0K"}', 7, 37, namespace="other") is None
    True

    ```
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self.recalled = 0
        self._held: OrderedDict[tuple, list[tuple[bytes, str]]] = OrderedDict()
        self._lock = threading.Lock()

    def recall(self, body: bytes, start: int, end: int, namespace: Hashable) -> str | None:
        """The remembered string whose bytes are `body[start:end]`, if one was remembered under `namespace`.

        Args:
            body (`bytes`): a request body.
            start (`int`): where the string's text starts in it (after its opening quote).
            end (`int`): where it ends (its closing quote).
            namespace (`Hashable`): the body's tenant.

        Returns:
            `str | None`: the very object `remember` was given, or `None`.
        """
        probe = _probe(body, start, end, namespace)
        with self._lock:
            for raw, text in self._held.get(probe, ()):
                if body.startswith(raw, start):  # the same length (probe): a comparison of the whole text, no copy
                    self._held.move_to_end(probe)
                    self.recalled += 1
                    return text
        return None

    def remember(self, body: bytes, start: int, end: int, text: str, namespace: Hashable) -> None:
        """Remembers `text`, the value of the string whose text is `body[start:end]`, under `namespace`.

        Args:
            body (`bytes`): a request body.
            start (`int`): where the string's text starts in it.
            end (`int`): where it ends.
            text (`str`): its value: `body[start:end]` decoded as ASCII (the caller checked that it has no escapes).
            namespace (`Hashable`): the body's tenant.
        """
        size = 2 * (end - start)
        if size > self.max_bytes:
            return
        probe, raw = _probe(body, start, end, namespace), body[start:end]
        with self._lock:
            held = self._held.setdefault(probe, [])
            if all(other != raw for other, _ in held):
                held.append((raw, text))
                self.bytes += size
            self._held.move_to_end(probe)
            while self.bytes > self.max_bytes:
                _, evicted = self._held.popitem(last=False)
                self.bytes -= sum(2 * len(other) for other, _ in evicted)


def _probe(body: bytes, start: int, end: int, namespace: Hashable) -> tuple:
    middle = (start + end) // 2
    windows = (body[start : start + _WINDOW], body[middle : middle + _WINDOW], body[max(end - _WINDOW, start) : end])
    return (namespace, end - start, *windows)
