"""The engine's request state, carrying the request's images: nothing about a request is kept anywhere else."""

from __future__ import annotations

from dataclasses import dataclass, fields

from transformers.generation.continuous_batching.requests import GenerationOutput, RequestState

from .prompt import RequestItems

# Fields `RequestState.__post_init__` derives from the others: a rebuilt state derives its own.
_DERIVED = {"_new_tokens_limit", "remaining_prefill_tokens", "_eos_token_ids"}


@dataclass
class ItemRequestState(RequestState):
    """`RequestState` of a request with images: its prompt holds placeholder keys (see `vlmprep.batching.prompt`).

    The features live here from admission until the request is dropped, so they are freed with it; forks (parallel
    sampling) share them rather than copy them.

    Args:
        items (`RequestItems`, *optional*): the request's items.
        kwargs: everything `RequestState` takes.
    """

    items: RequestItems | None = None

    def to_generation_output(self) -> GenerationOutput:
        """Upstream's output, with the real placeholder ids in `prompt_ids`."""
        output = super().to_generation_output()
        if self.items is not None:
            output.prompt_ids = self.items.restore_ids(output.prompt_ids)
        return output

    def fork(self, new_request_id: str) -> ItemRequestState:
        """Upstream's fork (a deep copy), sharing the images instead of copying their features."""
        items, self.items = self.items, None
        try:
            child = super().fork(new_request_id)
        finally:
            self.items = items
        child.items = items
        return child

    def create_equivalent_initial_request(self) -> ItemRequestState:
        """Upstream's restart-from-scratch request (offloading, forks that did not fit), keeping the images.

        The prompt it builds is the original one followed by the generated tokens, so the spans stay where they were.
        """
        state = super().create_equivalent_initial_request()
        values = {f.name: getattr(state, f.name) for f in fields(RequestState) if f.init and f.name not in _DERIVED}
        return ItemRequestState(**values, items=self.items)
