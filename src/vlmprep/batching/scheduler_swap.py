"""Swapping a batch processor's scheduler for a subclass of its own class (block-aware, prefill-counting).

transformers' engine builds its scheduler itself; vlmprep extends it by a subclass made for the scheduler's class,
built with the same settings and installed where the engine reads it (the batch processor and its offloading manager).
"""

from __future__ import annotations

from transformers.generation.continuous_batching.continuous_api import ContinuousBatchProcessor
from transformers.generation.continuous_batching.scheduler import Scheduler

__all__ = ["swap_scheduler"]


def swap_scheduler(processor: ContinuousBatchProcessor, scheduler_class: type[Scheduler]) -> Scheduler:
    """Replace the processor's scheduler by a `scheduler_class` built with its settings, and return the new one.

    Args:
        processor (`ContinuousBatchProcessor`): the engine's batch processor, before it schedules anything.
        scheduler_class (`type[Scheduler]`): a subclass of the current scheduler's class.

    Returns:
        `Scheduler`: the installed scheduler.
    """
    scheduler = processor.scheduler
    if processor.offloading_manager.scheduler is not scheduler:
        raise RuntimeError("The engine's offloading manager does not share the batch processor's scheduler.")
    swapped = scheduler_class(
        cache=scheduler.cache,
        safety_margin=scheduler.safety_margin,
        max_requests_per_batch=scheduler.max_requests_per_batch,
    )
    processor.scheduler = processor.offloading_manager.scheduler = swapped
    return swapped
