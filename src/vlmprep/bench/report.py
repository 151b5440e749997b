"""The summary of a `vlmprep.bench` run: table rows, a text table and a PNG bar chart (drawn with PIL)."""

from __future__ import annotations

from typing import Any

__all__ = ["format_bench_table", "summary_rows", "write_bench_plot"]


def _row(
    workload: str,
    metric: str,
    ours: Any,
    theirs: Any,
    ratio: float | None = None,
    kind: str | None = None,
    identical: bool | None = None,
) -> dict:
    """One table row; `kind` (`"time"` or `"work"`) puts its ratio on the plot."""
    if ratio is None and kind is not None and isinstance(ours, int | float) and theirs:
        ratio = round(ours / theirs, 3)
    return {
        "workload": workload,
        "metric": metric,
        "vlmprep": ours,
        "transformers": theirs,
        "ratio": ratio,
        "kind": kind,
        "tokens_identical": identical,
    }


def summary_rows(workloads: dict) -> list[dict]:
    """The summary table of a run's workloads, one row per metric.

    Args:
        workloads (`dict`): `run_bench(...)["workloads"]`.

    Returns:
        `list[dict]`: rows with `workload`, `metric`, `vlmprep`, `transformers`, `ratio` (vlmprep / transformers),
        `kind` (`"time"`, `"work"` or `None`: how the plot shows the ratio) and `tokens_identical` (first row of each
        workload only).
    """
    return [
        *_chat_rows(workloads["multi_turn_chat"]),
        *_question_rows(workloads["questions_one_image"]),
        *_shared_prompt_rows(workloads["shared_system_prompt"]),
        *_decode_rows(workloads["decode_speed"]),
        *_chunked_prefill_rows(workloads["chunked_prefill"]),
        *_text_only_rows(workloads["text_only_load"]),
    ]


def _chat_rows(chat: dict) -> list[dict]:
    """The rows of `multi_turn_chat`: one chat of several turns."""
    name = f"1 chat, {chat['turns']} turns"
    return [
        _row(name, "images encoded", chat["vlmprep_images_encoded"], chat["transformers_images_encoded"], kind="work",
             identical=chat["tokens_identical"]),
        _row(name, "tokens prefilled", chat["vlmprep_tokens_prefilled"], chat["transformers_tokens_prefilled"],
             kind="work"),
        _row(name, "wall time (s)", chat["vlmprep_time_s"], chat["transformers_time_s"], chat["time_ratio"], "time"),
    ]  # fmt: skip


def _question_rows(questions: dict) -> list[dict]:
    """The rows of `questions_one_image`: several questions about one image, and the cost of hashing it."""
    rows = []
    name = f"2 {questions['questions']} questions, 1 image"
    rows += [
        _row(name, "vision runs", questions["vlmprep_vision_runs"], questions["transformers_vision_runs"],
             kind="work", identical=questions["tokens_identical"]),
        _row(name, "wall time (s)", questions["vlmprep_time_s"], questions["transformers_time_s"],
             questions["time_ratio"], "time"),
    ]  # fmt: skip
    hashing = questions["hashing"]
    for key in sorted(key for key in hashing if key.endswith("px_ms")):
        side = key.removeprefix("hash_").removesuffix("px_ms")
        ratio = hashing[f"hash_{side}px_over_vision_forward"]
        rows.append(
            _row(name, f"hash {side}px (ms) vs 1 vision run", hashing[key], hashing["vision_forward_ms"], ratio)
        )
    return rows


def _shared_prompt_rows(shared: dict) -> list[dict]:
    """The rows of `shared_system_prompt`: one system prompt shared by requests with different images."""
    name = f"3 shared system prompt, {shared['requests']} images"
    return [
        _row(name, "tokens reused", shared["vlmprep_tokens_reused"], 0, identical=shared["tokens_identical"]),
        _row(name, "tokens prefilled", shared["vlmprep_tokens_prefilled"], shared["transformers_tokens_prefilled"],
             kind="work"),
        _row(name, "wall time (s)", shared["vlmprep_time_s"], shared["transformers_time_s"], shared["time_ratio"],
             "time"),
    ]  # fmt: skip


def _decode_rows(decode: dict) -> list[dict]:
    """The rows of `decode_speed`: decoding speed."""
    name = f"4 decode {decode['new_tokens']} tokens"
    return [
        _row(name, "tokens/s", decode["vlmprep_tokens_per_s"], decode["transformers_tokens_per_s"],
             identical=decode["tokens_identical"]),
        _row(name, "ms per token", decode["vlmprep_ms_per_token"], decode["transformers_ms_per_token"],
             decode["time_per_token_ratio"], "time"),
    ]  # fmt: skip


def _chunked_prefill_rows(chunked: dict) -> list[dict]:
    """The rows of `chunked_prefill`: chunked vs unchunked prefill."""
    name = f"5 prefill {chunked['prompt_tokens']} tokens"
    peak, seconds, diffs = chunked["peak_mib"], chunked["time_s"], chunked["logits_max_abs_diff"]
    size = chunked["chunk_size"]
    return [
        _row(name, "peak MiB, unchunked", peak["vlmprep_unchunked"], peak["transformers_unchunked"], kind="work",
             identical=chunked["tokens_identical"]),
        _row(name, f"peak MiB, chunks of {size}", peak["vlmprep_chunked"], peak["transformers_chunked"], kind="work"),
        _row(name, "time (s), unchunked", seconds["vlmprep_unchunked"], seconds["transformers_unchunked"],
             chunked["unchunked_time_ratio"], "time"),
        _row(name, f"time (s), chunks of {size}", seconds["vlmprep_chunked"], seconds["transformers_chunked"],
             chunked["chunked_time_ratio"], "time"),
        _row(name, "logits diff, chunked vs not", diffs["vlmprep_chunked_vs_unchunked"],
             diffs["transformers_chunked_vs_unchunked"]),
    ]  # fmt: skip


def _text_only_rows(text_only: dict) -> list[dict]:
    """The rows of `text_only_load`: loading the text decoder alone."""
    rows = []
    name = "6 text-only load"
    # A load takes ~0.2 s: one load per side (quick runs) is within the noise, so only medians of several are plotted.
    repeats = text_only["repeats"]
    load_kind, loads = ("time", f"median of {repeats}") if repeats > 1 else (None, "1 load")
    for dtype, result in text_only["by_dtype"].items():
        ours, theirs = result["vlmprep"], result["transformers"]
        rows += [
            _row(name, f"params ({dtype})", ours["params"], theirs["params"], kind="work"),
            _row(name, f"resident MiB ({dtype})", ours["resident_mib"], theirs["resident_mib"], kind="work"),
            _row(name, f"load s ({dtype}, {loads})", ours["load_s"], theirs["load_s"], result["load_time_ratio"],
                 load_kind),
        ]  # fmt: skip
    return rows


def _format(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == 0:
            return "0"
        return f"{value:.2e}" if abs(value) < 0.01 else f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def format_bench_table(summary: dict) -> str:
    """The summary table of a `run_bench` result as aligned text (what `vlmprep bench` prints).

    Args:
        summary (`dict`): what `run_bench` returned (or the `bench.json` it wrote).

    Returns:
        `str`
    """
    header = ("workload", "metric", "vlmprep", "transformers", "ratio", "same tokens")
    lines = [header]
    previous = None
    for row in summary["rows"]:
        workload = row["workload"] if row["workload"] != previous else ""
        previous = row["workload"]
        identical = _format(row["tokens_identical"]) if row["tokens_identical"] is not None else ""
        cells = (row["vlmprep"], row["transformers"], row["ratio"])
        lines.append((workload, row["metric"], *(_format(cell) for cell in cells), identical))
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    text = []
    for line in lines:
        left = [cell.ljust(width) for cell, width in zip(line[:2], widths, strict=False)]
        right = [cell.rjust(width) for cell, width in zip(line[2:], widths[2:], strict=True)]
        text.append("  ".join(left + right).rstrip())
    model = summary["model"]
    text.insert(1, "-" * len(text[0]))
    text.append(
        f"ratio = vlmprep / transformers; model: {model['params_total']:,} params "
        f"({model['params_vision_and_projector']:,} vision+projector), {summary['mode']} mode, "
        f"{summary['runtime_s']} s"
    )
    if "json_path" in summary:
        text.append(f"wrote {summary['json_path']} and {summary['png_path']}")
    return "\n".join(text)


def _bar_color(ratio: float) -> tuple[int, int, int]:
    if ratio < 0.95:
        return (46, 125, 50)  # green: vlmprep lower
    if ratio > 1.05:
        return (198, 40, 40)  # red: vlmprep higher
    return (120, 144, 156)  # gray: within 5%, about the noise of one run here


def write_bench_plot(summary: dict, path: str) -> None:
    """Draws the time and work ratios of a `run_bench` result as horizontal bars into a PNG (with PIL only).

    Args:
        summary (`dict`): what `run_bench` returned.
        path (`str`): the PNG to write.
    """
    from PIL import Image, ImageDraw, ImageFont

    panels = [
        ("Wall time, vlmprep / transformers", [row for row in summary["rows"] if row["kind"] == "time"]),
        ("Work and memory, vlmprep / transformers", [row for row in summary["rows"] if row["kind"] == "work"]),
    ]
    panels = [(title, [row for row in rows if row["ratio"] is not None]) for title, rows in panels]
    try:
        font = ImageFont.load_default(size=14)
    except TypeError:  # Pillow < 10.1: only the fixed bitmap font
        font = ImageFont.load_default()
    label_width, bar_width, row_height, margin = 430, 420, 24, 16
    # One scale for both panels, so that their "1" lines align.
    scale = bar_width / max([1.25, *(row["ratio"] for _, rows in panels for row in rows)])
    width = label_width + bar_width + 90
    height = margin + sum(40 + row_height * len(rows) + 16 for _, rows in panels) + 30
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    top = margin
    for title, rows in panels:
        draw.text((margin, top), title, fill="black", font=font)
        top += 28
        x0 = label_width
        for index, row in enumerate(rows):
            y = top + index * row_height
            label = f"{row['workload']}: {row['metric']}"
            draw.text((margin, y + 4), label, fill="black", font=font)
            color = _bar_color(row["ratio"])
            draw.rectangle((x0, y + 4, x0 + max(1, round(row["ratio"] * scale)), y + row_height - 4), fill=color)
            draw.text((x0 + round(row["ratio"] * scale) + 6, y + 4), f"{row['ratio']:.3g}", fill="black", font=font)
        bottom = top + row_height * len(rows)
        one = x0 + round(scale)
        for y in range(top, bottom, 6):  # a dashed line at ratio 1: same as transformers
            draw.line((one, y, one, y + 3), fill="gray")
        draw.text((one - 4, bottom + 2), "1", fill="gray", font=font)
        top = bottom + 28
    model = summary["model"]
    footer = (
        f"Gemma3, {model['params_total'] / 1e6:.1f}M params, random weights; {summary['mode']} run, "
        f"{summary['environment']['torch_threads']} CPU thread(s). Green: vlmprep lower by over 5%, red: higher."
    )
    draw.text((margin, height - 24), footer, fill="dimgray", font=font)
    image.save(path)
