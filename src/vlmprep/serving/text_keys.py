"""Keys of re-sent base64 texts, recognized by equality instead of hashed again.

A chat app re-sends every earlier photo of a conversation as the same multi-megabyte data URL each turn. Hashing its
text (`media_key`) costs ~2 ms per photo per turn on this class of CPU, more than the rest of the server's work on a
re-sent image. `TextKeyMemo` keeps the texts it keyed recently: a text equal to a held one (compared whole: a memory
comparison, ~10x faster than the hash) gets the held key without hashing. The key is still the hash of the text, so a
recognized text gets exactly the key hashing would give, whatever the memo holds or evicts; only the work differs.

Texts are held under a cheap probe (their namespace, length and a few sampled windows) that picks the candidates to
compare; the namespace (the tenant's salt and the kind of media) keeps one tenant's texts out of another's
comparisons. Bounded in bytes, least recently used texts evicted first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

__all__ = ["TextKeyMemo"]

# Characters per sampled window of the probe: enough to tell most different photos of one length apart, cheap to copy
_WINDOW = 64


class TextKeyMemo:
    """Remembers the keys of recent texts; a text equal to a remembered one is not hashed again.

    Thread-safe: the server reads requests' media in worker threads.

    Args:
        max_bytes (`int`): budget for the texts held (one byte per character: base64 is ASCII).

    Example:

    ```python
    >>> import hashlib
    >>> from vlmprep.serving.text_keys import TextKeyMemo
    >>> memo = TextKeyMemo(max_bytes=2**20)
    >>> def digest():
    ...     return hashlib.sha256(b"iVBORw0K").hexdigest()
    >>> memo.key("iVBORw0K", ("tenant", "image"), digest) == memo.key("iVBORw0K", ("tenant", "image"), digest)
    True
    >>> memo.recognized
    1

    ```
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self.recognized = 0
        self._held: OrderedDict[tuple, list[tuple[str, str]]] = OrderedDict()
        self._lock = threading.Lock()

    def key(self, text: str, namespace: Hashable, compute: Callable[[], str]) -> str:
        """The key of `text`: the remembered one if an equal text was keyed in `namespace`, else `compute()`.

        Args:
            text (`str`): the text (a data URL's base64 payload).
            namespace (`Hashable`): what else the key depends on (tenant salt, kind of media): texts are only
                compared within one namespace.
            compute (`Callable[[], str]`): computes the key from the text (called when the text is not recognized).

        Returns:
            `str`: the key, equal to `compute()`'s for this text.
        """
        middle = len(text) // 2
        probe = (namespace, len(text), text[:_WINDOW], text[middle : middle + _WINDOW], text[-_WINDOW:])
        with self._lock:
            for held, key in self._held.get(probe, ()):
                if held == text:
                    self._held.move_to_end(probe)
                    self.recognized += 1
                    return key
        key = compute()
        if len(text) > self.max_bytes:
            return key
        with self._lock:
            if all(held != text for held, _ in self._held.get(probe, ())):
                self._held.setdefault(probe, []).append((text, key))
                self.bytes += len(text)
            self._held.move_to_end(probe)
            while self.bytes > self.max_bytes:
                _, evicted = self._held.popitem(last=False)
                self.bytes -= sum(len(held) for held, _ in evicted)
        return key
