"""A 5-turn, 2-image chat through `vlmprep serve` (sequential and `--continuous-batching`) and `transformers serve`
(transformers 5.25: each model in an engine process).

The chat app's way: every turn re-sends the whole conversation, earlier images as base64 PNG data URLs of photo size
(1280x960), earlier answers as the server gave them; or, for the servers marked `uuid`, vLLM's convention: each photo
sent once with a `uuid`, later turns naming the `uuid` alone. The checkpoint is `bench_serving.py`'s `small` LLaVA
(decoder hidden size 512, 4 layers, the tiny vision tower). The servers (vlmprep sequential, vlmprep with continuous
batching, the same engine bounded by `--cb-num-blocks 256` as a user bounds its memory, vlmprep sequential with `uuid`
references, transformers serve, and a server that only receives: `bench_receive_only.py`, the cost of each turn's
bytes before any work) are all up at once, each on its own
loopback port and warmed up with one chat of other images; then the chat runs `--repeat` times (new images each time,
the same for every server), the servers taking turns chat by chat, so that a change of load on a shared machine falls
on all of them alike. Reported: the median time to first token (first streamed content chunk) per turn, the answers'
agreement, the load average before and after, the vlmprep servers' cache counters (`VLMPREP_SERVE_STATS`), and each
server's turn 5 minus turn 2 (turn 5 re-sends one photo more) beside how much turn 2 varies from chat to chat.

Usage:

```bash
python utils/bench_serving_chat.py --repeat 3 --json bench_serving_chat.json
python utils/bench_serving.py --chat                 # the same
```
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serving import SRC, _free_port, _start_server, build_checkpoint, stream_messages  # noqa: E402

TURNS = (
    (0, "What is in this picture?"),
    (None, "And the colors?"),
    (1, "Compare it with this one."),
    (None, "Which is brighter?"),
    (None, "Say it in one word."),
)
PHOTO_SIZE = (1280, 960)
RECEIVE_ONLY = "receive only"
UUID = "vlmprep, uuid"
SERVERS = {
    "vlmprep": ("vlmprep", ()),
    "vlmprep --continuous-batching": ("vlmprep", ("--continuous-batching",)),
    # How a user bounds the engine's memory on a small machine (upstream's default takes 60% of the RAM on a CPU)
    "vlmprep CB --cb-num-blocks 256": ("vlmprep", ("--continuous-batching", "--cb-num-blocks", "256")),
    # The chat app sends each photo once, then names it by its `uuid`
    UUID: ("vlmprep", ()),
    "transformers serve": ("transformers", ()),
    # No model: what receiving each turn's request costs (every re-sent photo's bytes); its answers are placeholders
    RECEIVE_ONLY: ("receive-only", ()),
}


def photo_data_url(seed: int, size: tuple[int, int] = PHOTO_SIZE) -> str:
    """A photo-size PNG (smooth shapes and grain, so it compresses like a photo rather than noise) as a data URL."""
    generator = np.random.default_rng(seed)
    width, height = size
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    base = np.stack([np.sin(6 * x + seed), np.cos(5 * y - seed), np.sin(4 * (x + y))], axis=-1)
    pixels = 127.5 * (base + 1) + generator.normal(0, 6, (height, width, 3))
    buffer = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), mode="RGB").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def run_chat(port: int, images: list[str], max_tokens: int, by_uuid: bool = False) -> tuple[list[str], list[float]]:
    """One 5-turn chat: its answers and the time to first token of each turn. With `by_uuid`, each image travels
    once, with a `uuid` (new per chat), and later turns name that `uuid` alone."""
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    messages, answers, ttfts = [], [], []
    chat_id = os.urandom(4).hex()
    for image, text in TURNS:
        if by_uuid:  # the images of earlier turns: their ids alone
            for message in messages:
                for part in message["content"] if isinstance(message["content"], list) else ():
                    if part["type"] == "image_url":
                        part["image_url"] = None
        parts = [] if image is None else [{"type": "image_url", "image_url": {"url": images[image]}}]
        if by_uuid:
            parts = [{**part, "uuid": f"{chat_id}-{image}"} for part in parts]
        messages.append({"role": "user", "content": [*parts, {"type": "text", "text": text}]})
        streamed = stream_messages(url, messages, max_tokens)
        answer, ttft = streamed["text"], streamed["ttft_s"]
        messages.append({"role": "assistant", "content": answer})
        answers.append(answer)
        ttfts.append(ttft)
    return answers, ttfts


def start_servers(checkpoint: Path, work: Path, size) -> dict:
    """Every server of `SERVERS` started on its own loopback port and warmed up with one chat of other images."""
    servers = {}
    try:
        for name, (kind, modes) in SERVERS.items():
            slug = "".join(character if character.isalnum() else "-" for character in name)
            port, stats_path = _free_port(), work / f"stats-{slug}.json"
            env = {"VLMPREP_SERVE_STATS": str(stats_path)} if kind == "vlmprep" else {}
            process = _start_server(kind, checkpoint, port, work / f"{slug}.log", SRC, modes, env)
            servers[name] = {"process": process, "port": port, "stats_path": stats_path, "by_uuid": name == UUID}
            run_chat(port, [photo_data_url(10**6, size), photo_data_url(10**6 + 1, size)], 8, name == UUID)  # warm-up
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def stop_servers(servers: dict) -> None:
    """Stops the servers (each writes its stats on the way out)."""
    for server in servers.values():
        server["process"].send_signal(signal.SIGTERM)
    for server in servers.values():
        try:
            server["process"].wait(timeout=60)
        except subprocess.TimeoutExpired:
            server["process"].kill()


def bench_interleaved(checkpoint: Path, chats: list[list[str]], max_tokens: int, work: Path, size) -> dict:
    """Every server runs every chat, the servers taking turns chat by chat (all of them up at once, idle but one):
    a change of the machine's load during the run falls on every server alike, not on whichever ran then."""
    servers = start_servers(checkpoint, work, size)
    runs = {name: [] for name in servers}
    try:
        for images in chats:
            for name, server in servers.items():
                runs[name].append(run_chat(server["port"], images, max_tokens, server["by_uuid"]))
    finally:
        stop_servers(servers)
    results = {}
    for name, server in servers.items():
        stats_path = server["stats_path"]
        stats = next(iter(json.loads(stats_path.read_text()).values())) if stats_path.exists() else None
        answers, ttfts = [answers for answers, _ in runs[name]], [ttfts for _, ttfts in runs[name]]
        results[name] = {"answers": answers, "ttfts_s": ttfts, "stats": stats}
    return results


def format_table(results: dict) -> str:
    names = list(results)
    medians = {
        name: [statistics.median(run[t] for run in results[name]["ttfts_s"]) for t in range(5)] for name in names
    }
    header = "turn  " + "  ".join(f"{name + ' TTFT (s)':>36}" for name in names) + "  transformers / vlmprep"
    lines = [header, "-" * len(header)]
    reference = medians.get("transformers serve")
    for turn in range(len(TURNS)):
        cells = "  ".join(f"{medians[name][turn]:>36.3f}" for name in names)
        ratios = (
            " / ".join(
                f"{reference[turn] / medians[name][turn]:.1f}x"
                for name in names
                if name not in ("transformers serve", RECEIVE_ONLY)
            )
            if reference
            else ""
        )
        lines.append(f"{turn + 1:>4}  {cells}  {ratios}")
    # Turn 5 re-sends one photo more than turn 2: the receive-only server's difference is what those bytes cost
    lines.append(
        "turn 5 - turn 2 (s): "
        + ", ".join(f"{name} {medians[name][4] - medians[name][1]:+.4f}" for name in names)
        + "; turn-2 spread (s): "
        + ", ".join(f"{name} {_spread([run[1] for run in results[name]['ttfts_s']]):.4f}" for name in names)
    )
    if RECEIVE_ONLY in medians:
        # What the one more photo's bytes cost a server doing nothing is the floor: above it is the server's own work
        floor = medians[RECEIVE_ONLY][4] - medians[RECEIVE_ONLY][1]
        lines.append(
            "turn 5 - turn 2 beyond the receive-only server's (s): "
            + ", ".join(
                f"{name} {medians[name][4] - medians[name][1] - floor:+.4f}" for name in names if name != RECEIVE_ONLY
            )
        )
    return "\n".join(lines)


def _spread(values: list[float]) -> float:
    """The interquartile range of `values` (what one turn's time varies by from chat to chat)."""
    quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return quartiles[2] - quartiles[0]


def main(argv: list[str] | None = None) -> int:
    """Runs the chat benchmark; prints the table (and writes every measurement with `--json`).

    Args:
        argv (`list[str]`, *optional*): command-line arguments; defaults to `sys.argv[1:]`.

    Returns:
        `int`: 0, or 1 when the servers' answers differ.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="chats per server (new images each); medians shown")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--json", type=Path, help="where to write every measurement")
    parser.add_argument("--image-size", type=int, nargs=2, default=PHOTO_SIZE, metavar=("W", "H"))
    args = parser.parse_args(argv)
    sys.path.insert(0, str(SRC))
    size = tuple(args.image_size)
    chats = [[photo_data_url(2 * r, size), photo_data_url(2 * r + 1, size)] for r in range(args.repeat)]
    with tempfile.TemporaryDirectory(prefix="bench-serving-chat-") as work:
        work = Path(work)
        checkpoint = build_checkpoint(work / "checkpoints", "small")
        load_before = os.getloadavg()
        results = bench_interleaved(checkpoint, chats, args.max_tokens, work, size)
        load_after = os.getloadavg()
    print(f"5-turn, 2-image chat ({size[0]}x{size[1]} PNG data URLs), small LLaVA, median of {args.repeat}:")
    print(f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} ({os.cpu_count()} CPUs)")
    print(format_table(results))
    for name, result in results.items():
        if result["stats"]:
            stats = {
                key: result["stats"].get(key)
                for key in ("runner", "encoder_cache", "prefix_cache", "media_cache", "engine_prefill", "item_refs")
            }
            print(f"{name} stats: {json.dumps(stats)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    answers = [result["answers"] for name, result in results.items() if name != RECEIVE_ONLY]
    same = all(other == answers[0] for other in answers)
    print("same answers:", "yes" if same else "NO")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
