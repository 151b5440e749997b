"""`vlmprep serve`: transformers' own OpenAI-compatible server (`transformers serve`), loading vlmprep's drop-ins.

There is no server of vlmprep's own: `vlmprep serve` is transformers' `serve` command with every argument it takes
(`vlmprep serve --help` prints them, `--api-server-count`, `--max-model-len` and the `--cb-*` flags included), plus
the media policy and limits of `ServingPolicy`. transformers runs each model in an engine process of its own;
`VisionPrepServe` (`vlmprep.serving.server`) makes that process load vlmprep's drop-in and runners, and serves
vlmprep's checked chat handler.

The server needs transformers 5.25's serving dependencies (FastAPI, uvicorn, the OpenAI client types) and an audio
decoder: `pip install "vlmprep[serving]"`.

When the environment variable `VLMPREP_SERVE_STATS` names a file, the server writes to it, when it stops, one JSON
object per loaded model, read from its engine process: the class that served it (and its runner), its encoder-cache
counters (hits are images not encoded again), the prefix cache's (`tokens_prefilled`, `tokens_reused`), the engine's
prompt tokens prefilled and shared (with `--continuous-batching`), the items named by `uuid` (`item_refs`), and the
API server's media cache's (`decodes`, `decode_hits`, `processed`, `process_hits`). The same summary is logged at
info level. With `--api-server-count` above 1, the engine process writes the file when it stops, without media-cache
counters (each API server has its own, logged).

Usage:

```bash
vlmprep serve --port 8000                          # models are loaded on demand, named by each request
vlmprep serve google/gemma-3-4b-it --port 8000     # one model, loaded at start
python -m vlmprep.serving --help                   # the same command without the `vlmprep` CLI
```
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import signal
import sys
import threading
from collections.abc import Sequence

from .stats import SERVE_STATS_ENV

__all__ = [
    "SERVE_STATS_ENV",
    "SERVING_INSTALL_COMMAND",
    "add_serve_command",
    "missing_serving_packages",
    "run_serve_command",
    "serve",
]

SERVING_INSTALL_COMMAND = 'pip install "vlmprep[serving]"'
PROG = "vlmprep serve"

# The modules `transformers.utils.import_utils.is_serve_available` asks for, by the distribution that provides them.
_SERVING_MODULES = {"fastapi": "fastapi", "uvicorn": "uvicorn", "openai": "openai", "pydantic": "pydantic"}


def missing_serving_packages() -> list[str]:
    """The packages `transformers serve` needs that are not installed.

    Returns:
        `list[str]`: distribution names, empty when the server can start.
    """
    return [package for module, package in _SERVING_MODULES.items() if importlib.util.find_spec(module) is None]


def add_serve_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Adds the `serve` command to an argparse subparsers object; its arguments go to `transformers serve` unchanged.

    The parser sets `func` (and `serve_args`) on the parsed namespace: `args.func(args)` runs the server and returns
    the exit status.

    Args:
        subparsers (`argparse._SubParsersAction`): what `ArgumentParser.add_subparsers()` returned.

    Returns:
        `argparse.ArgumentParser`: the `serve` parser.

    Example:

    ```python
    >>> import argparse
    >>> from vlmprep.serving import add_serve_command
    >>> parser = argparse.ArgumentParser(prog="vlmprep")
    >>> _ = add_serve_command(parser.add_subparsers(dest="command"))
    >>> parser.parse_args(["serve", "--port", "8001", "--host", "127.0.0.1"]).serve_args
    ['--port', '8001', '--host', '127.0.0.1']

    ```
    """
    parser = subparsers.add_parser(
        "serve",
        help="transformers' OpenAI-compatible server (`transformers serve`), loading vlmprep's drop-ins",
        description="Start `transformers serve` with every vlmprep drop-in registered with transformers' auto "
        "classes, so each image-text model it loads is vlmprep's class. Every argument is transformers serve's: "
        f"`{PROG} --help` lists them. Needs `{SERVING_INSTALL_COMMAND}`.",
        # `-` is no option prefix here, so that argparse reads nothing (`--help` included) and every argument reaches
        # transformers' command, which parses and documents them.
        prefix_chars="+",
        add_help=False,
    )
    parser.add_argument("serve_args", nargs=argparse.REMAINDER, help="the arguments of `transformers serve`")
    parser.set_defaults(func=run_serve_command, run=run_serve_command)
    return parser


def run_serve_command(args: argparse.Namespace) -> int:
    """Runs `vlmprep serve` from the namespace parsed by a parser built with `add_serve_command`.

    Args:
        args (`argparse.Namespace`): holds `serve_args`, the arguments for `transformers serve`.

    Returns:
        `int`: the exit status.
    """
    return serve(args.serve_args)


def serve(argv: Sequence[str] = ()) -> int:
    """Runs `transformers serve` with vlmprep's drop-ins and app, with `argv`, until the server is stopped (Ctrl-C,
    SIGTERM).

    Args:
        argv (`Sequence[str]`, *optional*): the arguments of `transformers serve` and the policy's flags, e.g.
            `["--port", "8001"]`. `--debug` (the `vlmprep` CLI's flag) is dropped.

    Returns:
        `int`: the exit status: 0 after a clean stop or `--help`, 2 for refused arguments, 1 when the server could not
        start.

    Raises:
        `ImportError`: when transformers' serving dependencies are missing, or the installed transformers' server is
            one vlmprep does not extend; the message says what to install.
    """
    missing = missing_serving_packages()
    if missing:
        raise ImportError(
            f"`{PROG}` runs transformers' server, which needs {', '.join(missing)}: run `{SERVING_INSTALL_COMMAND}`."
        )
    from ..utils._compat import serving_unsupported_message

    unsupported = serving_unsupported_message()
    if unsupported is not None:
        raise ImportError(unsupported)
    previous = _exit_cleanly_on_stop_signals()
    try:
        _transformers_serve_command().main(args=[arg for arg in argv if arg != "--debug"], prog_name=PROG)
    except SystemExit as stop:  # the command always ends this way: `--help`, refused arguments, or stopped
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0


def _exit_cleanly_on_stop_signals() -> dict:
    """uvicorn shuts down gracefully on SIGINT and SIGTERM, then raises the signal again for the handler it found:
    this one makes that a clean exit (status 0, the stats written) rather than a death by the signal.

    Returns:
        `dict`: the handlers replaced, to put back.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum, frame):
        raise SystemExit(0)

    return {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}


def _transformers_serve_command():
    """transformers' `serve` command (what `transformers serve` runs) with the media-policy and limit flags of
    `ServingPolicy`, as a click command of its own, which runs `VisionPrepServe`."""
    import typer
    from transformers.cli.serve import Serve

    from .policy import policy_from_options, policy_parameters
    from .server import VisionPrepServe

    def run_server(**kwargs) -> None:
        try:
            policy = policy_from_options(kwargs)  # checked before anything loads: a bad limit is a usage error
        except ValueError as error:
            raise typer.BadParameter(str(error)) from None
        VisionPrepServe(policy=policy, **kwargs)

    # typer builds the options from the signature and help text: those of `transformers serve`, and the policy's.
    upstream = inspect.signature(Serve)
    run_server.__signature__ = upstream.replace(parameters=[*upstream.parameters.values(), *policy_parameters()])
    run_server.__doc__ = Serve.__doc__
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)  # errors are the caller's to show
    app.command(name="serve")(run_server)
    return typer.main.get_command(app)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m vlmprep.serving ...`: `vlmprep serve ...` without the `vlmprep` CLI.

    Args:
        argv (`Sequence[str]`, *optional*): defaults to `sys.argv[1:]`.

    Returns:
        `int`: the exit status.
    """
    try:
        return serve(sys.argv[1:] if argv is None else argv)
    except ImportError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
