"""`hold_allocator_thresholds`: what `vlmprep serve` sets once up, so re-sent photos' bodies reuse pages."""

import platform
import subprocess
import sys
import textwrap

import pytest

from vlmprep.serving import allocator
from vlmprep.serving.allocator import hold_allocator_thresholds

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# A request's life as the server sees it: 3 MB arrive from a socket in pieces of at most 256 KiB (what asyncio reads at
# once), are joined, decoded, and freed
FAULTS_PER_REQUEST = textwrap.dedent(
    """
    import os, resource, runpy, socket, sys, threading
    # The module alone (importing vlmprep would take seconds): it imports nothing of vlmprep
    held = runpy.run_path(sys.argv[2])["hold_allocator_thresholds"]() if sys.argv[1] == "hold" else False
    body = os.urandom(1_500_000).hex().encode()
    sender, receiver = socket.socketpair()
    threading.Thread(target=lambda: [sender.sendall(body) for _ in range(23)], daemon=True).start()

    def request():
        pieces, size = [], 0
        while size < len(body):
            pieces.append(receiver.recv(min(262144, len(body) - size)))
            size += len(pieces[-1])
        return len(b"".join(pieces).decode("ascii"))

    for _ in range(3):
        request()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        request()
    print(held, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
    """
)


def _faults_per_request(mode: str) -> tuple[str, float]:
    run = subprocess.run(
        [sys.executable, "-c", FAULTS_PER_REQUEST, mode, allocator.__file__],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    held, faults = run.stdout.split()
    return held, float(faults)


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_held_thresholds_keep_a_request_s_pages_for_the_next():
    held, faults_held = _faults_per_request("hold")
    _, faults_default = _faults_per_request("default")
    assert held == "True"
    # Default glibc faults most of every request's pages in again (~1,400 here); held, almost none
    assert faults_default > 500
    assert faults_held < faults_default / 10


def test_an_operator_s_allocator_settings_win():
    assert hold_allocator_thresholds({"MALLOC_ARENA_MAX": "2"}) is False
    assert hold_allocator_thresholds({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}) is False
