"""glibc's allocator held at the ceilings its own adaptation aims at, for a server of multi-megabyte bodies.

A chat app re-sends every earlier photo each turn: several megabytes of body per request, read from the socket in
256 KiB pieces, joined, decoded. glibc serves an allocation above its mmap threshold (128 KiB at first) with a fresh
`mmap` and unmaps it on `free`; it raises that threshold as large blocks are freed (up to 32 MiB on 64-bit systems),
but sets its trim threshold to twice the largest block freed so far, and a request frees more than that at once (its
body, the joined copy, the decoded text): the heap's free top is given back to the kernel after every request, and the
next one faults every page in again, zeroed (thousands of page faults per request in a loop that receives, joins
and decodes a 3 MB body; none with the ceilings held). That was about half of what receiving a re-sent photo cost `vlmprep serve`.
`hold_allocator_thresholds` sets the ceilings glibc's adaptation aims at, once: blocks under 32 MiB come from the
heap, and up to 64 MiB of freed heap is kept for the next request. A process whose environment sets the allocator's
tunables (`MALLOC_*`, `GLIBC_TUNABLES`), or that runs on another C library, is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "hold_allocator_thresholds"]

# glibc's own ceilings for its adaptive thresholds on 64-bit systems (DEFAULT_MMAP_THRESHOLD_MAX, twice that for trim)
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES
# mallopt's parameter numbers (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def hold_allocator_thresholds(environ: dict[str, str] | None = None) -> bool:
    """Sets glibc's mmap and trim thresholds to the ceilings its own adaptation reaches (see the module docstring).

    Args:
        environ (`dict[str, str]`, *optional*): the environment to read `MALLOC_*` tunables from; `os.environ` by
            default.

    Returns:
        `bool`: whether the thresholds were set (False: not glibc, or the environment tunes the allocator itself).
    """
    environ = os.environ if environ is None else environ
    if any(name.startswith(("MALLOC_", "GLIBC_TUNABLES")) for name in environ):
        return False  # the operator's settings win
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success; setting the mmap threshold first keeps glibc from adapting it afterwards
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
