"""What the serve tests share: a free loopback port, image data URLs, a decompression bomb's header, deadlines, server
processes (started ahead of their tests a few at once, waited on until healthy, stopped), chat requests, and the plain
class's reference answers."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from vlmprep.serving import SERVE_STATS_ENV, SERVING_INSTALL_COMMAND, missing_serving_packages
from vlmprep.utils._compat import serving_unsupported_message

MAX_NEW_TOKENS = 6  # what the served chats ask for, and what the references generate
QUESTION = "What is in this picture?"
_SRC = Path(__file__).resolve().parents[2] / "src"

# A server test needs transformers' serving packages and the server vlmprep extends (transformers 5.25 rewrote it:
# `vlmprep serve` refuses it, which tests/cli/test_serve.py checks; issue 35 brings the server onto it)
needs_serving = pytest.mark.skipif(
    bool(missing_serving_packages()) or serving_unsupported_message() is not None,
    reason=serving_unsupported_message() or f"transformers' serving dependencies: {SERVING_INSTALL_COMMAND}",
)


def server_env(**extra: str) -> dict[str, str]:
    """The environment of a `vlmprep serve` process: this checkout's package first on the path, one OpenMP thread."""
    path = os.pathsep.join([str(_SRC), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **extra}


def greedy_reply(model, processor, messages: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """The plain transformers class's greedy reply to a chat (`MAX_NEW_TOKENS`, as the served chats ask).

    Returns:
        `(prompt_ids, new_tokens)`: the chat template's ids `(1, prompt)` and the reply's tokens `(new,)`.
    """
    inputs = processor.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    with torch.no_grad():
        output = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
    return inputs["input_ids"], output[0, inputs["input_ids"].shape[1] :]


def transformers_answer(model, processor, images: list, question: str = QUESTION) -> str:
    """The plain transformers class's greedy answer to one user turn (the images, then the question), decoded as
    transformers serve decodes it."""
    content = [*({"type": "image", "image": image} for image in images), {"type": "text", "text": question}]
    _, new_tokens = greedy_reply(model, processor, [{"role": "user", "content": content}])
    return processor.decode(new_tokens, skip_special_tokens=True)


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def data_url(image) -> str:
    """A PNG data URL of a PIL image (lossless: the server decodes the very pixels the reference gets)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def huge_png_header(width: int = 12000, height: int = 12000) -> bytes:
    """A few hundred bytes declaring `width` x `height` RGB pixels (a decompression bomb's header)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 1000))
        + chunk(b"IEND", b"")
    )


def time_left(deadline: float) -> float:
    """Seconds until `deadline` (a `time.monotonic()` value); fails the test once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise AssertionError("the server took too long to start and answer")
    return left


def wait_until_healthy(base_url: str, server: subprocess.Popen, log: Path, deadline: float) -> None:
    """Return once the server answers `/health`; fail with its log if it exits first."""
    while True:
        if server.poll() is not None:
            raise AssertionError(f"the server exited with {server.returncode}: {log.read_text()}")
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=min(2.0, time_left(deadline))) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            # A refused connection costs next to nothing: a short wait answers soon after the server listens
            time.sleep(0.1)


# A server's start: two interpreters (the API server, then the engine process it spawns) importing torch and
# transformers, about 10 s of one core; several starting at once on a busy 2-core machine share it.
START_TIMEOUT_S = 180


@dataclass
class LaunchedServer:
    """A `vlmprep serve` process started by `ServerLaunches`, listening on 127.0.0.1:`port` once healthy, writing its
    output to `log` (a file, not a pipe: a server that logs much never blocks on it)."""

    process: subprocess.Popen
    port: int
    log: Path
    stats_path: Path | None  # where it writes its stats when it stops (`$VLMPREP_SERVE_STATS`), if anywhere
    started: float  # `time.monotonic()` at its start

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_until_healthy(self) -> None:
        """Return once it answers `/health`; fail with its log if it exits first or takes over `START_TIMEOUT_S`."""
        wait_until_healthy(self.base_url, self.process, self.log, self.started + START_TIMEOUT_S)


class ServerLaunches:
    """`vlmprep serve` processes started ahead of the tests that use them, up to `max_running` at once.

    A server test's time is mostly its server's start, which keeps one core busy: a module that queues its servers
    here starts the next ones while a test waits for its own or sends it requests, so that both cores work. Each test
    still gets a server of its own, started with its own command line and sent no request before the test's; the test
    stops it (or it is killed when the test leaves it running), which starts the next one queued. A module whose tests
    time the answers waits until all its servers are up (`wait_until_all_healthy`) before its first test.

    Args:
        max_running (`int`, *optional*, defaults to 3): how many may run at once, started or starting, each holding an
            API server and an engine process in memory (about 1 GB together).
    """

    def __init__(self, max_running: int = 3):
        self.max_running = max_running
        self._queued: dict[str, tuple[list[str], dict[str, str], Path]] = {}  # in the order to start them
        self._running: dict[str, LaunchedServer] = {}

    def add(self, name: str, command: list[str], env: dict[str, str], log: Path) -> None:
        """Queue a server, started as soon as fewer than `max_running` run.

        Args:
            name (`str`): what `take` names it by.
            command (`list[str]`): its command line without `--port` (a free port is appended when it starts).
            env (`dict[str, str]`): its environment (`server_env`).
            log (`Path`): the file its output goes to.
        """
        self._queued[name] = (command, env, log)
        self._start_queued()

    def _start(self, name: str) -> None:
        command, env, log = self._queued.pop(name)
        port = free_loopback_port()  # taken at the start, not when queued: nothing else has bound it meanwhile
        with open(log, "w") as log_file:
            process = subprocess.Popen(
                [*command, "--port", str(port)], env=env, stdout=log_file, stderr=subprocess.STDOUT
            )
        stats_path = Path(env[SERVE_STATS_ENV]) if SERVE_STATS_ENV in env else None
        self._running[name] = LaunchedServer(process, port, log, stats_path, time.monotonic())

    def _start_queued(self) -> None:
        while self._queued and len(self._running) < self.max_running:
            self._start(next(iter(self._queued)))

    def wait_until_all_healthy(self) -> None:
        """Return once every running server answers `/health` (none is left starting to share the cores)."""
        for server in self._running.values():
            server.wait_until_healthy()

    @contextlib.contextmanager
    def take(self, name: str) -> Iterator[LaunchedServer]:
        """The server queued as `name` (started now if it was still waiting), killed on the way out if it still
        runs; the next one queued then starts."""
        if name in self._queued:
            self._start(name)
        try:
            yield self._running[name]
        finally:
            self._stop(name)
            self._start_queued()

    def _stop(self, name: str) -> None:
        server = self._running.pop(name)
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()

    def close(self) -> None:
        """Kill every running server; forget the queued ones."""
        self._queued.clear()
        for name in list(self._running):
            self._stop(name)


@contextlib.contextmanager
def launched_server(command: list[str], env: dict[str, str], log: Path) -> Iterator[LaunchedServer]:
    """One server started now (as `ServerLaunches.add` takes it: `command` without `--port`), killed on the way out if
    it still runs."""
    launches = ServerLaunches(max_running=1)
    launches.add("server", command, env, log)
    with launches.take("server") as server:
        yield server


def selected_tests(request: pytest.FixtureRequest) -> list[pytest.Item]:
    """The tests of the requesting fixture's module that this session runs, in their order: a module starts the
    servers of these only."""
    return [item for item in request.session.items if getattr(item, "module", None) is request.module]


def stop_gracefully(server: subprocess.Popen, timeout: float) -> None:
    """SIGTERM, then wait for the exit: the server writes its stats, then exits."""
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=timeout)


def post_chat(url: str, payload: dict, deadline: float) -> tuple[int, str]:
    """The HTTP status and the answer's text (from one JSON body or from the deltas of the server-sent events); an
    error's body as it came."""
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=time_left(deadline)) as response:
            status, body = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    if not payload.get("stream"):
        return status, json.loads(body)["choices"][0]["message"]["content"]
    events = [line.removeprefix("data: ") for line in body.splitlines() if line.startswith("data: ")]
    chunks = [json.loads(event) for event in events if event != "[DONE]"]
    if any("error" in chunk for chunk in chunks):
        return 500, body
    return status, "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"])
