"""Side-by-side: text-only loading of a multimodal checkpoint vs transformers' `AutoModelForCausalLM`.

Builds a small Gemma3 checkpoint whose vision tower (SigLIP) and projector hold ~15-20% of the weights, then loads
it with `vlmprep.text_only.AutoModelForCausalLM` and with `transformers.AutoModelForCausalLM` (which maps
`gemma3` to the whole `Gemma3ForConditionalGeneration`). Each load runs in a fresh subprocess so that its peak
resident memory belongs to that load alone; memory is reported above the RSS just before the load (after imports).
`vlmprep.bench.run_bench` runs the same measurement on its own bench checkpoint (workload 6).

    python utils/bench_text_only.py [--full] [--workdir DIR] [--out bench_out/text_only.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable

# Run in a fresh interpreter per measurement. Memory is read from /proc/self/status: VmHWM (peak RSS of this address
# space), not getrusage's ru_maxrss, which on Linux survives exec, so a child would inherit the parent's peak (the
# parent built the checkpoint). Loading at the checkpoint's dtype leaves tensors memory-mapped and not yet resident,
# so "resident" is measured after touching every parameter once, as a forward pass over all of them would.
_MEASURE = r"""
import json, sys, time
import torch, transformers
from vlmprep import text_only

def status_mib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024

loader, path, dtype = sys.argv[1], sys.argv[2], getattr(torch, sys.argv[3])
auto = text_only.AutoModelForCausalLM if loader == "vlmprep" else transformers.AutoModelForCausalLM
before = status_mib("VmRSS")
start = time.perf_counter()
model = auto.from_pretrained(path, dtype=dtype)
load_s = time.perf_counter() - start
load_peak = status_mib("VmHWM") - before
with torch.no_grad():
    for param in model.parameters():
        param.sum()
print(json.dumps({
    "class": type(model).__name__,
    "params": model.num_parameters(),
    "param_mib": sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20,
    "load_s": load_s,
    "load_peak_mib": load_peak,
    "resident_mib": status_mib("VmRSS") - before,
}))
"""

DTYPES = ("float32", "bfloat16")
LOADERS = ("vlmprep", "transformers")


def text_only_bench_config():
    """The config of this benchmark's own checkpoint: ~39M parameters, vision tower and projector ~20% of them.

    Returns:
        `Gemma3Config`
    """
    from transformers import Gemma3Config

    # Gemma3's vision tower runs at 896px in real checkpoints; a 224px tower keeps this one small.
    return Gemma3Config(
        text_config={
            "vocab_size": 16384,
            "hidden_size": 512,
            "intermediate_size": 2048,
            "num_hidden_layers": 6,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "sliding_window": 256,
            "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
        },
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": 384,
            "intermediate_size": 1536,
            "num_hidden_layers": 3,
            "num_attention_heads": 6,
            "image_size": 224,
            "patch_size": 14,
        },
        mm_tokens_per_image=64,
        image_token_index=16383,
        boi_token_index=16381,
        eoi_token_index=16382,
    )


def build_checkpoint(path: str, config=None) -> dict:
    """Saves a random-weight Gemma3 checkpoint to `path` (by default ~150 MB float32, vision ~20% of the weights).

    Args:
        path (`str`): directory to save into.
        config (`Gemma3Config`, *optional*): the checkpoint's config; defaults to `text_only_bench_config()`.

    Returns:
        `dict`: `path`, parameter counts (`total`, `text`, `vision`) and the checkpoint size in MiB.
    """
    from transformers import Gemma3ForConditionalGeneration

    from ..testing import tiny_model

    # Image-sensitive random weights: the benchmark's "same tokens" check must be able to fail on images.
    model = tiny_model(Gemma3ForConditionalGeneration, config if config is not None else text_only_bench_config())
    model.save_pretrained(path)
    total = model.num_parameters()
    text = model.model.language_model.num_parameters()  # lm_head is tied to the embeddings
    size_mib = sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path)) / 2**20
    return {"path": path, "total": total, "text": text, "vision": total - text, "checkpoint_mib": round(size_mib, 1)}


def _measure(loader: str, path: str, dtype: str) -> dict:
    if not os.path.exists("/proc/self/status"):
        raise RuntimeError("the text-only benchmark reads memory from /proc/self/status (Linux only)")
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, loader, path, dtype], capture_output=True, text=True, check=False, timeout=600
    )
    if result.returncode != 0:
        raise RuntimeError(f"{loader} load failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_text_only_benchmark(
    workdir: str,
    quick: bool = True,
    checkpoint: dict | None = None,
    dtypes: tuple[str, ...] = DTYPES,
    on_load: Callable[[], None] | None = None,
) -> dict:
    """Measures both loaders on one checkpoint, each load in a fresh subprocess.

    Both loaders load the same float32 checkpoint at float32 (tensors stay memory-mapped) and at bfloat16 (every
    tensor is cast, so a load materializes what it reads).

    Args:
        workdir (`str`): a directory for the checkpoint (created if needed).
        quick (`bool`, *optional*, defaults to `True`):
            One load per loader and dtype; otherwise three, interleaved, reporting the median.
        checkpoint (`dict`, *optional*):
            What `build_checkpoint` returned for an existing checkpoint to load; by default this benchmark's own
            checkpoint is built in `workdir`.
        dtypes (`tuple[str, ...]`, *optional*, defaults to `("float32", "bfloat16")`): the dtypes to load at.
        on_load (`Callable[[], None]`, *optional*): called after every load (e.g. to advance a progress bar).

    Returns:
        `dict`: `checkpoint` (parameter counts and size) and, per dtype and loader (`results["bfloat16"]["vlmprep"]`),
        the loaded class, parameter count and MiB, load seconds, the load's peak RSS above the pre-load RSS
        (`load_peak_mib`), and the RSS the model holds once every parameter was touched (`resident_mib`).
    """
    if checkpoint is None:
        checkpoint = build_checkpoint(os.path.join(workdir, "gemma3-bench"))
    repeats = 1 if quick else 3
    runs = {dtype: {loader: [] for loader in LOADERS} for dtype in dtypes}
    for _ in range(repeats):
        for dtype in dtypes:
            for loader in LOADERS:  # interleaved, so neither loader always runs on a colder page cache
                runs[dtype][loader].append(_measure(loader, checkpoint["path"], dtype))
                if on_load is not None:
                    on_load()
    results = {"checkpoint": {key: value for key, value in checkpoint.items() if key != "path"}, "repeats": repeats}
    for dtype, by_loader in runs.items():
        results[dtype] = {}
        for loader, loader_runs in by_loader.items():
            summary = dict(loader_runs[0])
            for key in ("param_mib", "load_s", "load_peak_mib", "resident_mib"):
                value = statistics.median(run[key] for run in loader_runs)
                summary[key] = round(value, 3 if key == "load_s" else 1)
            results[dtype][loader] = summary
    return results


def format_table(results: dict) -> str:
    """A small text table of `run_text_only_benchmark`'s results.

    Args:
        results (`dict`): the benchmark's results.

    Returns:
        `str`
    """
    checkpoint = results["checkpoint"]
    lines = [
        f"checkpoint: {checkpoint['total']:,} params ({checkpoint['checkpoint_mib']} MiB float32), text decoder "
        f"{checkpoint['text']:,}, vision+projector {checkpoint['vision']:,} "
        f"({100 * checkpoint['vision'] / checkpoint['total']:.1f}%); median of {results['repeats']} run(s)",
        f"{'dtype':<10}{'loader':<14}{'class':<32}{'params':>12}{'param MiB':>11}{'load s':>8}"
        f"{'load peak MiB':>15}{'resident MiB':>14}",
    ]
    for dtype in [key for key in DTYPES if key in results]:
        for loader in LOADERS:
            row = results[dtype][loader]
            lines.append(
                f"{dtype:<10}{loader:<14}{row['class']:<32}{row['params']:>12,}{row['param_mib']:>11.1f}"
                f"{row['load_s']:>8.3f}{row['load_peak_mib']:>15.1f}{row['resident_mib']:>14.1f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=None, help="where to build the checkpoint (default: a temp dir)")
    parser.add_argument("--out", default="bench_out/text_only.json", help="JSON output path")
    parser.add_argument("--full", action="store_true", help="three interleaved runs per loader, median reported")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="vlmprep-bench-") as tmp:
        results = run_text_only_benchmark(args.workdir or tmp, quick=not args.full)
    print(format_table(results))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
