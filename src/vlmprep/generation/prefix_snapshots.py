"""Where one `generate` call of a hybrid decoder keeps its recurrent layers' states for the prefix store.

A hybrid decoder resumes a stored prefix only at a token where the store holds every recurrent layer's state
(`vlmprep.cache.recurrent_state`), and a state is known only where a forward ends. A later request parts from a stored
row at a token no one can guess, so states are kept where requests commonly part:

- each item's and bidirectional block's end (prefill chunks are cut there): conversations sharing a system prompt with
  an image;
- the end of the prompt, where the answer starts (the generation boundary): a chat template that re-renders earlier
  answers (Qwen3.5's strips their thinking) parts from the stored row exactly there;
- the last `tail` positions of the answer, the end of the stored row among them: an answer re-sent with its last
  tokens re-tokenized, or an end-of-turn token replaced;
- every `every` decoded tokens: an answer edited in its middle resumes at most `every` tokens before the edit.

States after a decode step are read by a forward hook on the model (after each forward, only for the call's own
cache), as copies; those the policy drops are freed at the next step. Each stored snapshot costs every recurrent
layer's state (`StateSnapshot.nbytes`, whatever the tokens before it: docs/prefix_cache.md); it counts in the store's
budget and is evicted with its node.
"""

from __future__ import annotations

import weakref
from collections import deque

from transformers.cache_utils import Cache

from ..cache.recording import drop_recurrent_history
from ..cache.recurrent_state import (
    RecurrentCapture,
    StateSnapshot,
    cache_length,
    capture_recurrent_states,
    snapshot_of_row,
)
from .spans import split_chunks_at

__all__ = ["SnapshotPoints"]


class SnapshotPoints:
    """The recurrent states one call keeps, by the token count they were taken at, until its rows are stored.

    Args:
        cache (`Cache`): the call's cache.
        prompt_length (`int`): the prompt's tokens (padding included).
        tail (`int`): decoded positions kept at the end of the answer (the row's end among them).
        every (`int`): also keep every `every`-th decoded position (`0`: none).
    """

    def __init__(self, cache: Cache, prompt_length: int, tail: int, every: int):
        self.cache = cache
        self.prompt_length = prompt_length
        self.tail, self.every = tail, every
        self.captures: dict[int, RecurrentCapture] = {}
        self._recent: deque[int] = deque()  # decoded positions held only while they are among the last `tail`
        self._handle = None

    def chunks(self, chunks: list[tuple[int, int]], prepared) -> list[tuple[int, int]]:
        """Prefill chunks also cut at each item's and block's end: states are known only where a forward ends."""
        return split_chunks_at(chunks, [span.end for span in prepared.spans] + [end for _, end in prepared.intervals])

    def after_prefill_forward(self, position: int) -> None:
        """Keep the states a prefill forward ending at `position` inside the prompt left (a chunk's end)."""
        if position < self.prompt_length and position not in self.captures:
            self._capture(position)

    def watch(self, model) -> None:
        """Read the states after every forward of `model` on this call's cache that ends at or after the prompt's end
        (the last prefill forward, then each decode step), until `stop`."""
        points = weakref.ref(self)  # the hook must not keep a call that raised (and never stopped it) alive

        def after_forward(module, args, kwargs, output):
            owner = points()
            if owner is None or owner._handle is None:
                handle.remove()  # its call ended without `stop` (it raised): the hook leaves with the next forward
                return
            fed = kwargs.get("cache", kwargs.get("past_key_values"))
            if fed is owner.cache:  # another call's forward on the same model (another thread) is not this call's
                owner._after_forward()

        handle = model.register_forward_hook(after_forward, with_kwargs=True)
        self._handle = handle

    def stop(self) -> None:
        """Stop reading states after forwards (the call has finished)."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _after_forward(self) -> None:
        position = cache_length(self.cache)
        if position < self.prompt_length or position in self.captures:
            return  # inside the prompt: chunk ends come through `after_prefill_forward`
        self._capture(position)
        decoded = position - self.prompt_length
        if decoded == 0 or (self.every and decoded % self.every == 0):
            return  # the generation boundary and the periodic points stay
        self._recent.append(position)
        while len(self._recent) > self.tail:
            del self.captures[self._recent.popleft()]

    def _capture(self, position: int) -> None:
        self.captures[position] = capture_recurrent_states(self.cache, position)
        drop_recurrent_history(self.cache)  # what a recording layer kept of its past states: never rolled back

    def row_snapshots(self, row: int, length: int) -> dict[int, StateSnapshot]:
        """A row's snapshots at every kept point up to `length` (the tokens the cache holds, whose states are the
        cache's own when no forward's were kept there); points whose states are not all known are left out.

        Args:
            row (`int`): the batch row.
            length (`int`): the tokens the cache holds.

        Returns:
            `dict[int, StateSnapshot]`: by token count.
        """
        points = {position: captured for position, captured in self.captures.items() if 0 < position <= length}
        points.setdefault(length, None)  # `None`: the cache's own states, after the last token fed
        snapshots = {
            position: snapshot_of_row(self.cache, row, position, captured)
            for position, captured in points.items()
            if position
        }
        return {position: snapshot for position, snapshot in snapshots.items() if snapshot is not None}
