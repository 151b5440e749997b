"""Measurements shared by the bench workloads: peak activation memory, median times and paired ratios."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

__all__ = ["median_ms", "paired_times", "peak_tensor_bytes"]


def peak_tensor_bytes(fn: Callable[[], Any]) -> int | None:
    """Peak bytes of CPU tensors allocated and alive at once while `fn` runs, from torch.profiler's memory events.

    This is the activation memory of the call (weights and anything allocated before it are not counted); Python
    objects and allocator slack are not counted either.

    Args:
        fn (`Callable[[], Any]`): the call to measure.

    Returns:
        `int` or `None` (the profiler could not record memory on this build).
    """
    from torch.profiler import ProfilerActivity, profile

    saved_stderr = os.dup(2)  # kineto writes start/stop lines straight to fd 2
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                fn()
        events = prof.profiler.kineto_results.events()
        allocations = sorted((event.start_ns(), event.nbytes()) for event in events if event.name() == "[memory]")
    except (AttributeError, RuntimeError):
        return None
    finally:
        os.dup2(saved_stderr, 2)
        os.close(saved_stderr)
    live = peak = 0
    for _, nbytes in allocations:  # positive: an allocation, negative: a free
        live += nbytes
        peak = max(peak, live)
    return peak


def median_ms(fn: Callable[[], Any], runs: int) -> float:
    """Median wall-clock milliseconds of `runs` calls of `fn`.

    Args:
        fn (`Callable[[], Any]`): the call to time.
        runs (`int`): how many times to call it.

    Returns:
        `float`
    """
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def paired_times(ours: list[dict], theirs: list[dict], key: str = "time_s") -> dict:
    """Median times of both sides and the median of the per-repetition ratios (robust to drifting machine load).

    Args:
        ours (`list[dict]`): vlmprep's runs, one dict per repetition.
        theirs (`list[dict]`): transformers' runs, in the same order.
        key (`str`, *optional*, defaults to `"time_s"`): the measurement compared.

    Returns:
        `dict`: both medians, the median ratio and every run's value.
    """
    ratios = [mine[key] / other[key] for mine, other in zip(ours, theirs, strict=True)]
    return {
        f"vlmprep_{key}": round(statistics.median(run[key] for run in ours), 4),
        f"transformers_{key}": round(statistics.median(run[key] for run in theirs), 4),
        f"{key.removesuffix('_s')}_ratio": round(statistics.median(ratios), 3),
        "vlmprep_runs_s": [round(run[key], 4) for run in ours],
        "transformers_runs_s": [round(run[key], 4) for run in theirs],
    }
