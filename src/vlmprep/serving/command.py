"""`vlmprep serve`: transformers' own OpenAI-compatible server (`transformers serve`), loading vlmprep's drop-ins.

There is no server of vlmprep's own. `transformers serve` loads a model through transformers' auto classes
(`AutoModelForMultimodalLM` for every image-text model vlmprep adapts), so once `vlmprep.register()` has put the
drop-ins into those auto classes, the very same server runs vlmprep's classes, encoder cache included. `vlmprep serve`
does exactly that: it registers the drop-ins, then hands every argument to transformers' `serve` command unchanged
(`vlmprep serve --help` prints that command's options).

The server needs transformers' serving dependencies (FastAPI, uvicorn, the OpenAI client types):
`pip install "vlmprep[serving]"`.

When the environment variable `VLMPREP_SERVE_STATS` names a file, the server writes to it, when it stops, one JSON
object per loaded model: the class that served it, its encoder-cache counters (hits are images not encoded again),
and the server's cache counters: the prefix cache's (`tokens_prefilled`, `tokens_reused`), the media cache's
(`decodes`, `decode_hits`, `processed`, `process_hits`) and, with `--continuous-batching`, the engine's prompt tokens
prefilled and shared.
The same summary is logged at info level (`--log-level info`).

Usage:

```bash
vlmprep serve --port 8000                          # models are loaded on demand, named by each request
vlmprep serve google/gemma-3-4b-it --port 8000     # one model, loaded at start
python -m vlmprep.serving --help                   # the same command without the `vlmprep` CLI
```
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import inspect
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from ..utils.logging import get_logger

__all__ = [
    "SERVE_STATS_ENV",
    "SERVING_INSTALL_COMMAND",
    "add_serve_command",
    "missing_serving_packages",
    "run_serve_command",
    "serve",
    "served_model_stats",
    "served_models",
    "server_caches",
]

logger = get_logger(__name__)

SERVING_INSTALL_COMMAND = 'pip install "vlmprep[serving]"'
SERVE_STATS_ENV = "VLMPREP_SERVE_STATS"
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
    """Registers the drop-ins and runs `transformers serve` with `argv` until the server is stopped (Ctrl-C, SIGTERM).

    The drop-ins are registered for as long as the server runs (they stay registered if they were before).

    Args:
        argv (`Sequence[str]`, *optional*): the arguments of `transformers serve`, e.g. `["--port", "8001"]`.
            `--debug` (the `vlmprep` CLI's flag) is dropped.

    Returns:
        `int`: the exit status: 0 after a clean stop or `--help`, 2 for arguments transformers refuses.

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
    from ..registration import registered, unregister

    registered_before = registered()
    started = []
    try:
        try:
            _transformers_serve_command(started).main(args=[arg for arg in argv if arg != "--debug"], prog_name=PROG)
        except SystemExit as stop:  # the command always ends this way: `--help`, refused arguments, or started
            if not started:
                return stop.code if isinstance(stop.code, int) else 1
        held = _wait_until_stopped(started[0])
    finally:
        if started:  # also after a Ctrl-C that came before `_wait_until_stopped` listened for it
            started[0].kill_server()
        if not registered_before:
            unregister()  # a caller that runs the server in its own process gets transformers' classes back
    if held is None:
        logger.error("%s: the server stopped on its own (its log above says why).", PROG)
        return 1
    models, caches = held
    _report_stats(served_model_stats(models, caches))
    return 0


def _transformers_serve_command(started: list):
    """transformers' `serve` command (what `transformers serve` runs), with the media-policy and limit flags of
    `ServingPolicy`, as a click command of its own, which starts the server in a thread and appends the
    `VisionPrepServe` object to `started` instead of blocking."""
    import typer
    from transformers.cli.serve import Serve

    from ..registration import register
    from .policy import policy_from_options, policy_parameters
    from .server import VisionPrepServe

    def start_in_thread(**kwargs) -> None:
        try:
            policy = policy_from_options(kwargs)  # checked before anything loads: a bad limit is a usage error
        except ValueError as error:
            raise typer.BadParameter(str(error)) from None
        register()  # only now: `--help` or refused arguments leave transformers' auto classes as they were
        # `non_blocking` (a hidden option of transformers' command) runs uvicorn in a thread: this process then
        # stops it cleanly and reads its models' stats before they are freed.
        server = VisionPrepServe(policy=policy, **{**kwargs, "non_blocking": True})
        # A full collection would scan every object of the loaded model and libraries (~0.2 s for a small model, in
        # the middle of some request): what exists once the server is up lives as long as it, so it is not scanned.
        gc.freeze()
        started.append(server)

    # typer builds the options from the signature and help text: those of `transformers serve`, and the policy's.
    upstream = inspect.signature(Serve)
    start_in_thread.__signature__ = upstream.replace(parameters=[*upstream.parameters.values(), *policy_parameters()])
    start_in_thread.__doc__ = Serve.__doc__
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)  # errors are the caller's to show
    app.command(name="serve")(start_in_thread)
    return typer.main.get_command(app)


def _wait_until_stopped(server: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Blocks until the server thread ends. SIGINT/SIGTERM ask uvicorn to shut down gracefully (a second SIGINT:
    at once), after taking the models it holds, since its shutdown frees them.

    Returns:
        `tuple[dict[str, PreTrainedModel], dict[str, Any]] | None`: the models and the caches (`server_caches`) held
        when the stop was asked; `None` when the server stopped on its own (it could not start).
    """
    uvicorn_server = server.server
    signals_received = []
    # uvicorn only listens to signals in the main thread, and the server runs in another one: listen for it.
    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {
            signum: signal.signal(signum, lambda signum, frame: signals_received.append(signum)) for signum in handled
        }
    held = None
    try:
        thread = server._thread  # set by `Serve.start_server`: the thread running uvicorn
        while thread.is_alive():
            thread.join(timeout=0.2)  # a timed join, so that the signal handlers run
            if signals_received and held is None:
                held = served_models(server), server_caches(server)
                uvicorn_server.should_exit = True
            if signal.SIGINT in signals_received[1:]:  # asked again: do not wait for open connections
                uvicorn_server.force_exit = True
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return held


def served_models(server: Any) -> dict[str, Any]:
    """The models a running `transformers serve` server holds.

    Args:
        server (`transformers.cli.serve.Serve`): the running server.

    Returns:
        `dict[str, PreTrainedModel]`: model name (as requests name it, with its revision) -> model.
    """
    loaded = dict(server._model_manager.loaded_models)  # transformers' `ModelManager`, by model name
    return {name: timed.model for name, timed in loaded.items() if timed.model is not None}


def server_caches(server: Any) -> dict[str, Any]:
    """The caches of a running `vlmprep serve` server, to read their counters after it stops.

    Args:
        server (`VisionPrepServe`): the running server.

    Returns:
        `dict[str, Any]`: `"prefix_cache"` (`PrefixCache`), `"media_cache"` (`MediaCache`), `"engine_prefill"`
        (the continuous-batching engine's `EnginePrefillStats`), each `None` when off or not started, and
        `"hinted_hashes"` (`HintedHashes`: images' content hashes taken by their media-cache key).
    """
    handler = getattr(server, "_chat_handler", None)
    cb_manager = getattr(getattr(server, "_generation_state", None), "_cb_manager", None)
    engine = getattr(cb_manager, "_cb", None)
    from ..cache.hash_hints import HINTED_HASHES

    return {
        "prefix_cache": getattr(handler, "prefix_cache", None),
        "media_cache": getattr(handler, "media_cache", None),
        "engine_prefill": getattr(engine, "prefill_stats", None),
        # Content hashes of re-sent images taken by their media-cache key (the process's, shared by the models)
        "hinted_hashes": HINTED_HASHES,
    }


def served_model_stats(models: dict[str, Any], caches: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The class and encoder-cache counters of each served model, with the server's cache counters.

    Args:
        models (`dict[str, PreTrainedModel]`): from `served_models`.
        caches (`dict[str, Any]`, *optional*): from `server_caches`; shared by the models the server serves.

    Returns:
        `dict[str, dict]`: model name -> `{"class": "module.Name", "drop_in": bool, "encoder_cache": dict | None,
        "prefix_cache": dict | None, "media_cache": dict | None, "engine_prefill": dict | None}` (`encoder_cache`
        holds `EncoderCacheStats` fields; `None` for a transformers class or a disabled cache; the others the fields
        of `PrefixCacheStats`, `MediaCacheStats` and `EnginePrefillStats`, `None` when off).
    """
    from ..generation import VisionPrepGenerationMixin

    server_stats = {
        name: dataclasses.asdict(cache if dataclasses.is_dataclass(cache) else cache.stats)
        if cache is not None
        else None
        for name, cache in (caches or {}).items()
    }
    stats = {}
    for name, model in models.items():
        drop_in = isinstance(model, VisionPrepGenerationMixin)
        cache = model.encoder_cache if drop_in else None
        stats[name] = {
            "class": f"{type(model).__module__}.{type(model).__qualname__}",
            "drop_in": drop_in,
            "encoder_cache": dataclasses.asdict(cache.stats) if cache is not None else None,
            **server_stats,
        }
    return stats


def _report_stats(stats: dict[str, dict[str, Any]]) -> None:
    for name, model_stats in stats.items():
        cache = model_stats["encoder_cache"]
        counters = f"encoder cache {cache['hits']} hits, {cache['misses']} misses" if cache else "no encoder cache"
        prefix, media = model_stats.get("prefix_cache"), model_stats.get("media_cache")
        if prefix:
            counters += (
                f"; prefix cache {prefix['tokens_reused']} tokens reused, {prefix['tokens_prefilled']} prefilled"
            )
        if media:
            counters += f"; media cache {media['decode_hits']} images not decoded again, {media['decodes']} decoded"
        logger.info("%s served %s with %s: %s", PROG, name, model_stats["class"], counters)
    path = os.environ.get(SERVE_STATS_ENV)
    if path:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(stats, file, indent=2)


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
