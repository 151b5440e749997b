"""N concurrent image chats: `vlmprep serve --continuous-batching` vs `transformers serve --continuous-batching`.

Both servers serve the same checkpoint (a tiny random-weight LLaVA, `vlmprep.serving_checkpoint`), started one after
the other on a loopback port with the same options. For each N (1, 4, 8, 16 by default) N streamed chats, one new image
each, are sent at once from threads; the script reports throughput (generated tokens per second of wall time, from the
first request sent to the last answer), p50/p95 time to first token (first content chunk) and checks that both servers
gave the same answers.

Usage:

```bash
python utils/bench_serving.py                       # N = 1 4 8 16, 24 new tokens, results table on stdout
python utils/bench_serving.py --concurrency 1 8 --max-tokens 16 --json bench_serving.json
```
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
from PIL import Image

SRC = Path(__file__).resolve().parents[1] / "src"
QUESTION = "What is in this picture?"
START_TIMEOUT_S = 180
REQUEST_TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _data_url(seed: int) -> str:
    pixels = np.random.default_rng(seed).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels, mode="RGB").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _start_server(kind: str, checkpoint: Path, port: int, log_path: Path, src: Path = SRC) -> subprocess.Popen:
    """`kind` is "vlmprep" (`python -m vlmprep.serving`, from `src`) or "transformers" (`transformers serve`)."""
    server = [sys.executable, "-m", "vlmprep.serving"] if kind == "vlmprep" else ["transformers", "serve"]
    options = [str(checkpoint), "--continuous-batching", "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    with open(log_path, "w") as log:
        process = subprocess.Popen([*server, *options], env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{kind} server exited: {log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return process
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"{kind} server did not start within {START_TIMEOUT_S} s")


def _stream_chat(url: str, image_url: str, max_tokens: int) -> dict:
    """One streamed chat: its answer, time to first content chunk and completion tokens."""
    payload = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": image_url}},
                    {"type": "text", "text": QUESTION},
                ],
            }
        ],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
    }
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    start = time.perf_counter()
    first_token_s, text, tokens = None, [], 0
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
        for raw_line in response:
            line = raw_line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            if "error" in chunk:
                raise RuntimeError(chunk["error"])
            content = chunk["choices"][0]["delta"].get("content") if chunk["choices"] else None
            if content:
                first_token_s = first_token_s or time.perf_counter() - start
                text.append(content)
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return {"text": "".join(text), "ttft_s": first_token_s or time.perf_counter() - start, "tokens": tokens}


def _run_round(port: int, concurrency: int, first_seed: int, max_tokens: int) -> dict:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    results: list[dict | Exception | None] = [None] * concurrency

    def send(index: int) -> None:
        try:
            results[index] = _stream_chat(url, _data_url(first_seed + index), max_tokens)
        except Exception as error:  # reported below, with the others
            results[index] = error

    threads = [threading.Thread(target=send, args=(index,)) for index in range(concurrency)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall_s = time.perf_counter() - start
    errors = [result for result in results if not isinstance(result, dict)]
    if errors:
        raise RuntimeError(f"{len(errors)} of {concurrency} requests failed (see the server log): {errors[0]!r}")
    ttfts = sorted(result["ttft_s"] for result in results)
    tokens = sum(result["tokens"] for result in results)
    return {
        "wall_s": wall_s,
        "tokens": tokens,
        "tokens_per_s": tokens / wall_s,
        "ttft_p50_s": statistics.median(ttfts),
        "ttft_p95_s": ttfts[min(len(ttfts) - 1, round(0.95 * (len(ttfts) - 1)))],
        "answers": [result["text"] for result in results],
    }


def bench_server(
    kind: str, checkpoint: Path, concurrency: list[int], max_tokens: int, log_dir: Path, src: Path = SRC
) -> dict:
    """Start one server, warm it up with one chat, run each round, stop it.

    Returns:
        `dict`: N -> that round's measurements.
    """
    port = _free_port()
    server = _start_server(kind, checkpoint, port, log_dir / f"{kind}.log", src)
    try:
        _run_round(port, 1, first_seed=10**6, max_tokens=max_tokens)  # loads the engine; not measured
        # Each round's images are new (the same ones for both servers): no encoder-cache hit across rounds.
        return {n: _run_round(port, n, first_seed=1000 * n, max_tokens=max_tokens) for n in concurrency}
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def format_table(results: dict[str, dict], concurrency: list[int]) -> str:
    """The side-by-side table: one row per N."""
    header = (
        f"{'N':>3}  {'tok/s vlmprep':>13}  {'tok/s transformers':>18}  {'ratio':>6}  "
        f"{'TTFT p50/p95 vlmprep (s)':>25}  {'TTFT p50/p95 transformers (s)':>30}  same answers"
    )
    lines = [header, "-" * len(header)]
    for n in concurrency:
        ours, theirs = results["vlmprep"][n], results["transformers"][n]
        lines.append(
            f"{n:>3}  {ours['tokens_per_s']:>13.1f}  {theirs['tokens_per_s']:>18.1f}  "
            f"{ours['tokens_per_s'] / theirs['tokens_per_s']:>6.2f}  "
            f"{ours['ttft_p50_s']:>12.2f} / {ours['ttft_p95_s']:<10.2f}  "
            f"{theirs['ttft_p50_s']:>14.2f} / {theirs['ttft_p95_s']:<13.2f}  "
            f"{'yes' if ours['answers'] == theirs['answers'] else 'NO'}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints the table (and writes every measurement with `--json`).

    Args:
        argv (`list[str]`, *optional*): command-line arguments; defaults to `sys.argv[1:]`.

    Returns:
        `int`: 0, or 1 when the two servers' answers differ.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--json", type=Path, help="where to write every measurement")
    parser.add_argument("--src", type=Path, default=SRC, help="the vlmprep source tree the vlmprep server runs")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(SRC))
    from vlmprep.serving_checkpoint import build_llava_checkpoint

    with tempfile.TemporaryDirectory(prefix="bench-serving-") as work:
        work = Path(work)
        checkpoint = build_llava_checkpoint(work / "checkpoint")
        results = {
            kind: bench_server(kind, checkpoint, args.concurrency, args.max_tokens, work, args.src)
            for kind in ("vlmprep", "transformers")
        }
    print(format_table(results, args.concurrency))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    same = all(results["vlmprep"][n]["answers"] == results["transformers"][n]["answers"] for n in args.concurrency)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
