"""Side-by-side benchmark of vlmprep and transformers on one random-weight Gemma3 checkpoint (`vlmprep bench`).

Every workload runs `vlmprep.Gemma3ForConditionalGeneration` and `transformers.Gemma3ForConditionalGeneration`, loaded
from the same saved weights, in one process: repetitions are interleaved (the order alternates) and medians are
reported, so that the load other processes put on the machine hits both alike. Decoding is greedy everywhere, with a
fixed answer length, and every workload checks that both generate the same tokens. Work is counted with hooks
(images through the vision tower, tokens fed to the language model), never inferred from time.

1. multi-turn chat: 5 turns, 2 images, each turn re-sending the whole conversation (vlmprep: a `PrefixCache`);
2. N questions about one image (vlmprep: its default encoder cache), and the cost of hashing pixels;
3. a shared system prompt with a different image per request (vlmprep: a `PrefixCache`);
4. decode speed: vlmprep's per-token overhead;
5. chunked vs unchunked prefill of a long multi-image prompt: time, peak memory and logits;
6. text-only loading of the multimodal checkpoint (`vlmprep.bench.text_only`, one subprocess per load).

Ratios are vlmprep / transformers: below 1 means vlmprep does less work, or takes less time.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from dataclasses import asdict

import torch
import transformers
from transformers.utils import logging as hf_logging

from .report import summary_rows, write_bench_plot
from .settings import SETTINGS, TINY_ENV, BenchSettings, bench_model_config
from .text_only import build_checkpoint, run_text_only_benchmark
from .workloads import BenchRunner

__all__ = ["run_bench"]


def _planned_runs(settings: BenchSettings) -> int:
    """Measured runs of a mode, for the progress bar: one tick each."""
    pairs = 2 * settings.repeats
    text_only = len(settings.text_only_dtypes) * 2 * (1 if settings.text_only_quick else 3)
    return pairs + (pairs + 1) + pairs + pairs + (4 * settings.repeats + 4) + text_only


class _Progress:
    """A stderr progress bar (tqdm, which transformers depends on), or nothing when disabled."""

    def __init__(self, total: int, enabled: bool):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, disable=not enabled, unit="run", dynamic_ncols=True)

    def describe(self, name: str) -> None:
        self.bar.set_description(name)

    def tick(self, name: str) -> None:
        self.bar.set_description(name, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def _load_average() -> list[float] | None:
    # Other processes' load is the main source of noise in these timings: recorded so a reader can judge it.
    return [round(load, 2) for load in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _model_summary(checkpoint: dict, runner: BenchRunner) -> dict:
    config = runner.config
    text, vision = config.text_config, config.vision_config
    return {
        "architecture": "Gemma3ForConditionalGeneration (random weights, float32)",
        "params_total": checkpoint["total"],
        "params_text": checkpoint["text"],
        "params_vision_and_projector": checkpoint["vision"],
        "checkpoint_mib": checkpoint["checkpoint_mib"],
        "text": (
            f"{text.num_hidden_layers} layers, hidden {text.hidden_size}, MLP {text.intermediate_size}, "
            f"{text.num_attention_heads} heads ({text.num_key_value_heads} KV), vocab {text.vocab_size}, "
            f"sliding window {text.sliding_window}"
        ),
        "vision": (
            f"SigLIP, {vision.num_hidden_layers} layers, hidden {vision.hidden_size}, MLP {vision.intermediate_size}, "
            f"{vision.image_size}x{vision.image_size} px, patch {vision.patch_size}"
        ),
        "tokens_per_image": config.mm_tokens_per_image,
        "attn_implementation": runner.ours.config._attn_implementation,
    }


def _text_only_summary(results: dict) -> dict:
    summary = {"checkpoint": results["checkpoint"], "repeats": results["repeats"], "by_dtype": {}}
    for dtype in (key for key in ("float32", "bfloat16") if key in results):
        ours, theirs = results[dtype]["vlmprep"], results[dtype]["transformers"]
        summary["by_dtype"][dtype] = {
            "vlmprep": ours,
            "transformers": theirs,
            "params_ratio": round(ours["params"] / theirs["params"], 3),
            "load_time_ratio": round(ours["load_s"] / theirs["load_s"], 3) if theirs["load_s"] else None,
            "resident_ratio": round(ours["resident_mib"] / theirs["resident_mib"], 3)
            if theirs["resident_mib"]
            else None,
        }
    return summary


def run_bench(
    quick: bool = False,
    out_dir: str = "bench_out",
    progress: bool = True,
    *,
    threads: int | None = 1,
    _tiny: bool = False,
) -> dict:
    """Runs every workload with vlmprep and transformers side by side and writes `bench.json` and `bench.png`.

    Args:
        quick (`bool`, *optional*, defaults to `False`):
            Fewer repetitions and shorter workloads: about 1.5 minutes on a busy 2-core CPU, the full run about 3.
        out_dir (`str`, *optional*, defaults to `"bench_out"`): where `bench.json` and `bench.png` are written.
        progress (`bool`, *optional*, defaults to `True`): show a progress bar on stderr.
        threads (`int`, *optional*, defaults to 1):
            `torch.set_num_threads` for the run (restored afterwards); `None` keeps torch's setting. One thread by
            default: both libraries run the same kernels, and on a shared CPU a multi-threaded op stalls whenever one
            of its threads is descheduled, which made 2-thread timings vary up to 10x between repetitions here.
        _tiny (`bool`, *optional*, defaults to `False`):
            A 2-layer model and one repetition, for the smoke test (also set by the `VLMPREP_BENCH_TINY=1` env var).

    Returns:
        `dict`: `mode`, `model` (sizes), `environment`, `settings`, `workloads` (every measurement, per workload),
        `rows` (the summary table: workload, metric, vlmprep, transformers, ratio), `runtime_s` and the paths written.

    Example:

    ```python
    >>> from vlmprep.bench import format_bench_table, run_bench
    >>> summary = run_bench(quick=True)  # doctest: +SKIP
    >>> print(format_bench_table(summary))  # doctest: +SKIP
    ```
    """
    mode = "tiny" if _tiny or os.environ.get(TINY_ENV) == "1" else "quick" if quick else "full"
    settings = SETTINGS[mode]
    started = time.perf_counter()
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    environment = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_at_start": _load_average(),
    }
    bar = _Progress(_planned_runs(settings), progress)
    hf_bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # transformers' save/load bars would break the line of ours
    try:
        model, workloads = _run_workloads(mode, settings, bar)
    finally:
        bar.close()
        torch.set_num_threads(previous_threads)
        if hf_bars:
            hf_logging.enable_progress_bar()

    environment["load_average_at_end"] = _load_average()
    os.makedirs(out_dir, exist_ok=True)
    json_path, png_path = os.path.join(out_dir, "bench.json"), os.path.join(out_dir, "bench.png")
    summary = {
        "mode": mode,
        "ratio": "vlmprep / transformers (below 1: vlmprep does less, or is faster)",
        "model": model,
        "environment": environment,
        "settings": asdict(settings),
        "workloads": workloads,
        "rows": summary_rows(workloads),
        "runtime_s": round(time.perf_counter() - started, 1),
        "json_path": json_path,
        "png_path": png_path,
    }
    with open(json_path, "w") as f:
        json.dump(summary, f, indent=2)
    write_bench_plot(summary, png_path)
    return summary


def _run_workloads(mode: str, settings, bar: _Progress) -> tuple[dict, dict]:
    """Build the bench checkpoint in a temporary directory and run every workload on it: (model sizes, workloads)."""
    with tempfile.TemporaryDirectory(prefix="vlmprep-bench-") as workdir:
        bar.describe("building the bench model")
        config = bench_model_config(tiny=mode == "tiny")
        checkpoint = build_checkpoint(os.path.join(workdir, "gemma3-bench"), config)
        runner = BenchRunner(checkpoint["path"], settings, bar.tick)
        runner.warm_up()
        workloads = {
            "multi_turn_chat": runner.multi_turn_chat(),
            "questions_one_image": runner.questions_one_image(),
            "shared_system_prompt": runner.shared_system_prompt(),
            "decode_speed": runner.decode_speed(),
            "chunked_prefill": runner.chunked_prefill(),
        }
        model = _model_summary(checkpoint, runner)
        del runner  # the text-only loads run in subprocesses; free this process's two models first
        text_only = run_text_only_benchmark(
            workdir,
            quick=settings.text_only_quick,
            checkpoint=checkpoint,
            dtypes=settings.text_only_dtypes,
            on_load=lambda: bar.tick("text-only load"),
        )
        workloads["text_only_load"] = _text_only_summary(text_only)
    return model, workloads
