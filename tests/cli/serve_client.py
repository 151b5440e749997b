"""What the serve tests share: a free loopback port, image data URLs, a decompression bomb's header, deadlines, and
waiting for a healthy server."""

from __future__ import annotations

import base64
import io
import os
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import pytest
import torch

from vlmprep.serving import SERVING_INSTALL_COMMAND, missing_serving_packages

MAX_NEW_TOKENS = 6  # what the served chats ask for, and what the references generate
QUESTION = "What is in this picture?"
_SRC = Path(__file__).resolve().parents[2] / "src"

needs_serving = pytest.mark.skipif(
    bool(missing_serving_packages()), reason=f"transformers' serving dependencies: {SERVING_INSTALL_COMMAND}"
)


def server_env(**extra: str) -> dict[str, str]:
    """The environment of a `vlmprep serve` process: this checkout's package first on the path, one OpenMP thread."""
    path = os.pathsep.join([str(_SRC), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **extra}


def transformers_answer(model, processor, images: list, question: str = QUESTION) -> str:
    """The plain transformers class's greedy answer to one user turn (the images, then the question), decoded as
    transformers serve decodes it."""
    content = [*({"type": "image", "image": image} for image in images), {"type": "text", "text": question}]
    inputs = processor.apply_chat_template(
        [{"role": "user", "content": content}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        output = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
    return processor.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


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
            time.sleep(0.3)
