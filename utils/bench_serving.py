"""N concurrent image chats: `vlmprep serve --continuous-batching` vs `transformers serve --continuous-batching`.

Both servers serve the same checkpoint, started one after the other on a loopback port with the same options. Two
model sizes, each a random-weight LLaVA on the tiny vision tower and tokenizer of `vlmprep.testing.checkpoints`:
`tiny` (that checkpoint as it is: decoder hidden size 32, 2 layers, where a step costs almost nothing and the servers'
Python dominates) and `small` (decoder hidden size 512, 4 layers, where the decoder's forward costs more). For each N
(1, 4, 8, 16 by default), `--repeat` times, N streamed chats, one new image each, are sent at once from threads; the
script reports the median throughput (generated tokens per second of wall time, from the first request sent to the
last answer), p50/p95 time to first token (first content chunk, over every repeat) and checks that both servers gave
the same answers.

Usage:

```bash
python utils/bench_serving.py                       # both sizes, N = 1 4 8 16, 24 new tokens, 3 repeats
python utils/bench_serving.py --sizes tiny --concurrency 1 8 --max-tokens 16 --json bench_serving.json
python utils/bench_serving.py --chat                # one 5-turn, 2-image chat: TTFT per turn (bench_serving_chat.py)
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
# Decoder sizes besides the tiny checkpoint's (vision tower, tokenizer and chat template stay the tiny checkpoint's).
DECODER_SIZES = {
    "tiny": {},
    "small": {
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 64,
    },
}
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


def _start_server(
    kind: str,
    checkpoint: Path,
    port: int,
    log_path: Path,
    src: Path = SRC,
    modes: tuple[str, ...] = ("--continuous-batching",),
    env: dict | None = None,
) -> subprocess.Popen:
    """`kind` is "vlmprep" (`python -m vlmprep.serving`, from `src`), "transformers" (`transformers serve`) or
    "receive-only" (`bench_receive_only.py`: no model, the cost of receiving a request)."""
    if kind == "receive-only":
        server, options = [sys.executable, str(Path(__file__).with_name("bench_receive_only.py")), str(port)], []
    else:
        server = [sys.executable, "-m", "vlmprep.serving"] if kind == "vlmprep" else ["transformers", "serve"]
        options = [str(checkpoint), *modes, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
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


def stream_messages(url: str, messages: list, max_tokens: int) -> dict:
    """One streamed chat completion of `messages`: its answer, time to first content chunk and completion tokens."""
    payload = {"messages": messages, "temperature": 0, "max_tokens": max_tokens, "stream": True}
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


def _stream_chat(url: str, image_url: str, max_tokens: int) -> dict:
    """One streamed single-image chat: its answer, time to first content chunk and completion tokens."""
    content = [{"type": "image_url", "image_url": {"url": image_url}}, {"type": "text", "text": QUESTION}]
    return stream_messages(url, [{"role": "user", "content": content}], max_tokens)


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
        "ttfts_s": ttfts,
        "answers": [result["text"] for result in results],
    }


def build_checkpoint(directory: Path, size: str) -> Path:
    """The benchmark's checkpoint of one size: `vlmprep.testing.checkpoints`'s LLaVA, its decoder resized for `small`."""
    from vlmprep.testing.checkpoints import build_llava_checkpoint

    tiny = build_llava_checkpoint(directory / "tiny")
    if not DECODER_SIZES[size]:
        return tiny
    import transformers

    from vlmprep.testing import tiny_llava_config
    from vlmprep.testing.checkpoints import write_chat_checkpoint

    config = tiny_llava_config()
    config.text_config.update(DECODER_SIZES[size])
    model_class = transformers.LlavaForConditionalGeneration

    def tiny_processor(config, tokenizer):  # the tiny checkpoint's: same tokenizer, image processor, template
        return transformers.AutoProcessor.from_pretrained(tiny)

    return write_chat_checkpoint(directory / size, model_class, config, tiny_processor)


def bench_server(
    kind: str,
    checkpoint: Path,
    concurrency: list[int],
    max_tokens: int,
    log_dir: Path,
    src: Path = SRC,
    repeat: int = 1,
) -> dict:
    """Start one server, warm it up with one chat, run each round `repeat` times, stop it.

    Returns:
        `dict`: N -> the list of that N's rounds' measurements.
    """
    port = _free_port()
    server = _start_server(kind, checkpoint, port, log_dir / f"{kind}.log", src)
    try:
        _run_round(port, 1, first_seed=10**6, max_tokens=max_tokens)  # loads the engine; not measured
        # Each round's images are new (the same ones for both servers): no encoder-cache hit across rounds.
        return {
            n: [_run_round(port, n, first_seed=1000 * n + 100 * r, max_tokens=max_tokens) for r in range(repeat)]
            for n in concurrency
        }
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def summarize(rounds: list[dict]) -> dict:
    """One N's repeats: median throughput, p50/p95 time to first token over every chat of every repeat."""
    ttfts = sorted(ttft for result in rounds for ttft in result["ttfts_s"])
    return {
        "tokens_per_s": statistics.median(result["tokens_per_s"] for result in rounds),
        "tokens_per_s_all": [result["tokens_per_s"] for result in rounds],
        "ttft_p50_s": statistics.median(ttfts),
        "ttft_p95_s": ttfts[min(len(ttfts) - 1, round(0.95 * (len(ttfts) - 1)))],
    }


def format_table(results: dict[str, dict], concurrency: list[int]) -> str:
    """The side-by-side table: one row per N (median throughput over the repeats)."""
    header = (
        f"{'N':>3}  {'tok/s vlmprep':>13}  {'tok/s transformers':>18}  {'ratio':>6}  "
        f"{'TTFT p50/p95 vlmprep (s)':>25}  {'TTFT p50/p95 transformers (s)':>30}  same answers"
    )
    lines = [header, "-" * len(header)]
    for n in concurrency:
        ours, theirs = summarize(results["vlmprep"][n]), summarize(results["transformers"][n])
        same = [a["answers"] for a in results["vlmprep"][n]] == [b["answers"] for b in results["transformers"][n]]
        lines.append(
            f"{n:>3}  {ours['tokens_per_s']:>13.1f}  {theirs['tokens_per_s']:>18.1f}  "
            f"{ours['tokens_per_s'] / theirs['tokens_per_s']:>6.2f}  "
            f"{ours['ttft_p50_s']:>12.2f} / {ours['ttft_p95_s']:<10.2f}  "
            f"{theirs['ttft_p50_s']:>14.2f} / {theirs['ttft_p95_s']:<13.2f}  "
            f"{'yes' if same else 'NO'}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints the table (and writes every measurement with `--json`).

    Args:
        argv (`list[str]`, *optional*): command-line arguments; defaults to `sys.argv[1:]`.

    Returns:
        `int`: 0, or 1 when the two servers' answers differ (for any size).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--sizes", nargs="+", choices=sorted(DECODER_SIZES), default=["tiny", "small"])
    parser.add_argument("--repeat", type=int, default=3, help="rounds per N; the table shows medians")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--json", type=Path, help="where to write every measurement")
    parser.add_argument("--src", type=Path, default=SRC, help="the vlmprep source tree the vlmprep server runs")
    parser.add_argument("--chat", action="store_true", help="run utils/bench_serving_chat.py instead")
    args, rest = parser.parse_known_args(argv)
    if args.chat:
        from bench_serving_chat import main as chat_main

        return chat_main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    sys.path.insert(0, str(SRC))

    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as work:
        work = Path(work)
        for size in args.sizes:
            checkpoint = build_checkpoint(work / "checkpoints", size)
            results[size] = {
                kind: bench_server(kind, checkpoint, args.concurrency, args.max_tokens, work, args.src, args.repeat)
                for kind in ("vlmprep", "transformers")
            }
    for size in args.sizes:
        print(f"\n{size} decoder {DECODER_SIZES[size] or '(hidden size 32, 2 layers)'}, median of {args.repeat}:")
        print(format_table(results[size], args.concurrency))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    same = all(
        [a["answers"] for a in by_kind["vlmprep"][n]] == [b["answers"] for b in by_kind["transformers"][n]]
        for by_kind in results.values()
        for n in args.concurrency
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
