"""The `vlmprep` command: `demo`, `generate`, `chat`, `bench` and `serve`, one module each.

Every failure the user can cause (a missing file, an unreadable image, an unsupported model, bad arguments) ends with
one line on stderr, `vlmprep: error: ...`, and a non-zero exit code; `--debug` shows the traceback instead.

Usage:

```bash
vlmprep demo                                   # offline: a tiny random-weight Gemma3, a scripted 4-turn chat
vlmprep generate --model DIR --image cat.png --prompt "What is in this picture?"
vlmprep chat --model DIR                       # /image FILE attaches an image to the next message, /quit exits
vlmprep bench --quick --out bench_out
vlmprep serve --port 8000                      # transformers' own server, loading vlmprep's drop-ins
```
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from .errors import PROG, CLIError, one_line
from .loading import quiet_transformers
from .parsing import CommandParser

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

# The subcommands, in the order `vlmprep --help` lists them, as "module:function". The function takes the parser's
# subcommands (`argparse._SubParsersAction`), adds one parser with `subparsers.add_parser(name, ...)` and sets its
# handler with `set_defaults(run=handler)`: a function of the parsed `argparse.Namespace` returning the exit status.
# Every subcommand accepts `--debug`. Each module is imported whenever the parser is built (every `vlmprep` run,
# `--help` included), so its heavy imports (torch, transformers) belong inside the handler.
# Adding a subcommand from another module is one line here.
SUBCOMMANDS = (
    "vlmprep.cli.demo:add_demo_command",
    "vlmprep.cli.generate:add_generate_command",
    "vlmprep.cli.chat:add_chat_command",
    "vlmprep.cli.bench:add_bench_command",
    "vlmprep.serving:add_serve_command",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `vlmprep` command, with every subcommand of `SUBCOMMANDS`.

    Returns:
        `argparse.ArgumentParser`
    """
    parser = CommandParser(
        prog=PROG,
        description="Drop-in transformers vision-language models whose vision encoder runs once, in input "
        "preparation.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and transformers' own logs")
    parser.add_argument("--version", action="version", version=_version_line())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    subparsers.required = True
    for entry in SUBCOMMANDS:
        module, function = entry.split(":")
        getattr(importlib.import_module(module), function)(subparsers)
    for subparser in subparsers.choices.values():
        # Also accepted after the command; SUPPRESS keeps a subcommand's default from overwriting the top-level value.
        # A parser listed under several names (aliases), or one declaring its own `--debug`, already has it; one
        # whose arguments all go elsewhere (`serve`: `+` is its only option prefix) takes none.
        if "-" not in subparser.prefix_chars:
            continue
        with contextlib.suppress(argparse.ArgumentError):
            subparser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `vlmprep` command.

    Args:
        argv (`Sequence[str]`, *optional*): the arguments after the program name; defaults to `sys.argv[1:]`.

    Returns:
        `int`: the exit status (0 on success).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # known before parsing, so that even a parsing failure can show its traceback
    try:
        args = build_parser().parse_args(argv)
        with quiet_transformers(enabled=not debug):
            return args.run(args)
    except SystemExit as stop:  # argparse's `--help`
        return stop.code if isinstance(stop.code, int) else 0
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:  # `vlmprep demo | head`: the reader left, nothing is wrong
        _silence_stdout()
        return 0
    except Exception as error:
        if debug:
            traceback.print_exc()
        print(f"{PROG}: error: {one_line(error)}", file=sys.stderr)
        return error.exit_code if isinstance(error, CLIError) else 1


def _version_line() -> str:
    import transformers

    import vlmprep

    return (
        f"{PROG} {vlmprep.__version__} (tested with transformers {', '.join(vlmprep.__transformers_versions__)}; "
        f"installed: {transformers.__version__})"
    )


def _silence_stdout() -> None:
    # Python flushes stdout again at exit and would report the broken pipe; point it at /dev/null first.
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
