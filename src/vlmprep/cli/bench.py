"""`vlmprep bench`: run the benchmarks of `vlmprep.bench` and print their summary."""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

from .errors import CLIError


def add_bench_command(subparsers) -> None:
    """Add the `bench` subcommand.

    Args:
        subparsers (`argparse._SubParsersAction`): the `vlmprep` parser's subcommands.
    """
    parser = subparsers.add_parser("bench", help="run the benchmarks (vlmprep.bench) and print their summary")
    parser.add_argument(
        "--quick", action="store_true", help="a short run (shorter workloads, fewer repeats; same model)"
    )
    parser.add_argument("--out", default="bench_out", metavar="DIR", help="where results are written (bench_out)")
    parser.set_defaults(run=run_bench_command)


def run_bench_command(args: argparse.Namespace) -> int:
    """`vlmprep bench`: run `vlmprep.bench.run_bench` and print its summary.

    Args:
        args (`argparse.Namespace`): `quick`, `out`.

    Returns:
        `int`: 0.

    Raises:
        `CLIError` (exit code 2): `vlmprep.bench` is not installed.
    """
    try:
        bench = importlib.import_module("vlmprep.bench")  # lazily: the command works without its dependencies
    except ModuleNotFoundError as error:
        if error.name not in ("vlmprep.bench", "vlmprep"):
            raise  # the bench module exists but one of its own imports is missing: that message is the useful one
        raise CLIError("the benchmarks (vlmprep.bench) are not available in this installation", exit_code=2) from None
    summary = bench.run_bench(quick=args.quick, out_dir=args.out, progress=True)
    formatter = getattr(bench, "format_bench_table", None)
    print(formatter(summary) if callable(formatter) else format_summary(summary))
    return 0


def format_summary(summary: Any) -> str:
    """A benchmark summary as readable text: its `rows` as a table (with runtime and files written), else JSON.

    Args:
        summary (`Any`): what `run_bench` returned.

    Returns:
        `str`
    """
    if isinstance(summary, str):
        return summary
    rows = summary.get("rows") if isinstance(summary, dict) else None
    if not (isinstance(rows, list) and rows and all(isinstance(row, dict) for row in rows)):
        return json.dumps(summary, indent=2, default=str)
    columns = [key for key in rows[0] if key in ("workload", "metric", "vlmprep", "transformers", "ratio")]
    columns = columns or list(rows[0])
    cells = [[_cell(row.get(column)) for column in columns] for row in rows]
    widths = [max(len(column), *(len(line[i]) for line in cells)) for i, column in enumerate(columns)]
    lines = [columns, ["-" * width for width in widths], *cells]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in lines]
    extras = [f"{key}: {summary[key]}" for key in ("runtime_s", "json_path", "png_path") if key in summary]
    return "\n".join(lines + ([""] + extras if extras else []))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
