"""How many prompt tokens the continuous-batching engine prefilled, and how many it took from shared pages.

Upstream's scheduler looks a pending request up in the shared pages once it is scheduled
(`Scheduler._infer_request_tokens`) and drops the matched tokens from its prefill, logging the match at debug level
only. `PrefillCounting` (a scheduler mixin, installed by `ItemBatchingManager` on every engine it builds) counts each
request's prompt and matched tokens the first time it is looked up, for the server's stats. The same class shares
partly filled pages (`vlmprep.batching.partial_pages`).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass

from transformers.generation.continuous_batching.continuous_api import ContinuousBatchProcessor
from transformers.generation.continuous_batching.requests import RequestStatus
from transformers.generation.continuous_batching.scheduler import Scheduler

from .partial_pages import PartialPageSharing
from .scheduler_swap import swap_scheduler

__all__ = ["EnginePrefillStats", "PrefillCounting", "install_prefill_counting"]

# Request ids remembered as counted: a request the scheduler could not fit is looked up again at a later step.
_REMEMBERED_IDS = 4096


@dataclass
class EnginePrefillStats:
    """The engine's prompt counters.

    Args:
        requests (`int`): requests looked up in the shared pages.
        prompt_tokens (`int`): their prompt tokens.
        tokens_shared (`int`): prompt tokens taken from shared pages instead of prefilled.
        tokens_prefilled (`int`): prompt tokens prefilled (`prompt_tokens - tokens_shared`).
    """

    requests: int = 0
    prompt_tokens: int = 0
    tokens_shared: int = 0
    tokens_prefilled: int = 0


class PrefillCounting:
    """Scheduler mixin: counts each request's prompt and shared tokens into `prefill_stats` (see the module)."""

    prefill_stats: EnginePrefillStats
    _counted: OrderedDict
    _count_lock: threading.Lock

    def _infer_request_tokens(self, state, request_ids_to_remove_from_waiting: set[str]) -> list[int]:
        first_look = state.status == RequestStatus.PENDING and state.request_id not in self._counted
        prompt = len(state.remaining_prefill_tokens)
        tokens = super()._infer_request_tokens(state, request_ids_to_remove_from_waiting)
        if first_look:
            shared = prompt - len(state.remaining_prefill_tokens)
            with self._count_lock:
                self._counted[state.request_id] = None
                while len(self._counted) > _REMEMBERED_IDS:
                    self._counted.popitem(last=False)
                stats = self.prefill_stats
                stats.requests += 1
                stats.prompt_tokens += prompt
                stats.tokens_shared += shared
                stats.tokens_prefilled += prompt - shared
        return tokens


@functools.cache
def _counting_class(scheduler_class: type[Scheduler]) -> type[Scheduler]:
    # Counting sees what partial-page sharing took from the prefill as shared
    bases = (PrefillCounting, PartialPageSharing, scheduler_class)
    return type(f"PrefillCounting{scheduler_class.__name__}", bases, {})


def install_prefill_counting(processor: ContinuousBatchProcessor, stats: EnginePrefillStats) -> None:
    """Gives a freshly built batch processor (and its offloading manager) the counting form of its scheduler.

    Args:
        processor (`ContinuousBatchProcessor`): the engine's batch processor, before it schedules anything.
        stats (`EnginePrefillStats`): where the counts go (the engine's, kept across its batch processors).
    """
    scheduler = processor.scheduler
    if not isinstance(scheduler, PrefillCounting):
        scheduler = swap_scheduler(processor, _counting_class(type(scheduler)))
        scheduler._counted = OrderedDict()
        scheduler._partial_pages = OrderedDict()
        scheduler._count_lock = threading.Lock()
    scheduler.prefill_stats = stats
