"""`VisionPrepServe`: transformers' `Serve` (the `transformers serve` command) serving vlmprep's drop-ins and app.

transformers 5.25's `Serve.__init__` builds its `ModelLoader` and `GenerationState`, then serves: `run` in this
process, or `run_api_servers`, which starts the model's engine process and several API server processes (each running
`run`). `VisionPrepServe` swaps in vlmprep's loader and state at both entries (they are pickled into the engine
process, which they make load the drop-in and vlmprep's runners, `vlmprep.serving.loader`), and its `run` serves
vlmprep's chat handler and app (`vlmprep.serving.app.build_app`) where upstream's `run` serves its own.

When the server stops, `run` reads the engine process's counters (`vlmprep_call("stats")`) before the engine stops,
adds its media cache's, logs them and writes them to `$VLMPREP_SERVE_STATS` (see `vlmprep.serving.command`). With
several API servers, their supervisor stops the engine first: the engine process writes its own counters then.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from transformers.cli.serve import Serve

from .app import build_app
from .chat import VisionPrepChatCompletionHandler
from .errors import server_logger
from .loader import VisionPrepGenerationState, VisionPrepModelLoader
from .policy import DEFAULT_LIMITS, ServingPolicy
from .stats import report_served_stats

__all__ = [
    "STATS_TIMEOUT_S",
    "VisionPrepServe",
    "check_server_hooks",
    "engine_stats_of",
    "served_stats",
]

logger = server_logger()

# How long the stopping server waits for an engine's counters.
STATS_TIMEOUT_S = 10.0


class VisionPrepServe(Serve):
    """transformers' `Serve`, serving vlmprep's drop-ins and app under `policy` (see the module docstring).

    Args:
        policy (`ServingPolicy`, *optional*, defaults to `DEFAULT_LIMITS`): the media policy, limits and caches.
        *args, **kwargs: `Serve`'s arguments; the call serves until the server stops, as upstream's.
    """

    def __init__(self, *args, policy: ServingPolicy = DEFAULT_LIMITS, **kwargs):
        check_server_hooks()
        self._policy = policy
        super().__init__(*args, **kwargs)

    def _adopt_vlmprep_parts(self) -> None:
        self.loader = VisionPrepModelLoader.adopt(self.loader, self._policy)
        self.generation_state = VisionPrepGenerationState.adopt(self.generation_state)

    def run_api_servers(self, count: int) -> None:
        """Upstream's API server processes, around an engine process that loads vlmprep's drop-in.

        Args:
            count (`int`): how many API server processes.
        """
        self._adopt_vlmprep_parts()
        self.loader.stats_on_stop = True  # the engine process writes its counters itself (`loader`)
        super().run_api_servers(count)

    def run(self, socket: Any = None, engine_connection: tuple | None = None) -> None:
        """Serves vlmprep's app (upstream's `run` serves its own), on `socket` or the command line's host and port.

        Args:
            socket (`socket.socket`, *optional*): an API server's listening socket (`run_api_servers`).
            engine_connection (`tuple`, *optional*): an API server's connection to the engine process.
        """
        import uvicorn
        from transformers.cli.serving.model_manager import ModelManager
        from transformers.cli.serving.utils import freeze_garbage_collector, set_serve_log_level

        self._adopt_vlmprep_parts()
        set_serve_log_level(self.log_level, self.enable_log_requests)
        model_manager = ModelManager(
            self.loader,
            self.generation_state,
            model_timeout=self.model_timeout,
            force_model=self.force_model,
            engine_connection=engine_connection,
        )
        chat_handler = VisionPrepChatCompletionHandler(
            model_manager=model_manager,
            generation_state=self.generation_state,
            chat_template_kwargs=self.chat_template_kwargs,
            policy=self._policy,
        )

        async def report_stats() -> None:
            # With several API servers, their supervisor stops the engine first, which then reports itself (`loader`)
            if engine_connection is None:
                report_served_stats(await served_stats(model_manager, chat_handler))

        app = build_app(model_manager, chat_handler, self._policy, self.enable_cors, before_shutdown=report_stats)

        async def stop_if_an_engine_died() -> None:
            if model_manager.is_dead:
                server.should_exit = True

        config = uvicorn.Config(
            app,
            host=self.host,
            port=self.port,
            log_level="info",
            callback_notify=stop_if_an_engine_died,
            timeout_notify=5,
        )
        server = uvicorn.Server(config)
        # A full collection would scan every object of the libraries in the middle of some request: what exists once
        # the server is up lives as long as it (the engine process freezes its own, the model's, likewise)
        freeze_garbage_collector()
        server.run(sockets=None if socket is None else [socket])
        gc.unfreeze()
        if model_manager.is_dead:
            raise RuntimeError("An engine died (see the error above): stopping the server")
        if not server.started:
            raise SystemExit(1)  # it could not listen: uvicorn logged why


def check_server_hooks() -> None:
    """Refuses to start when transformers' server or engine lacks a method or attribute vlmprep extends.

    Raises:
        `RuntimeError`: naming what is missing.
    """
    import transformers

    from ..utils._engine_compat import missing_engine_hooks

    problems = missing_engine_hooks(include_server=True)
    if problems:
        # A renamed upstream name would leave an override unused: the engine would load transformers' class, or
        # image chats would run as text, without a word
        raise RuntimeError(
            f"transformers {transformers.__version__}'s server lacks what vlmprep extends: "
            + "; ".join(problems)
            + '. Install the transformers version vlmprep supports: `pip install "vlmprep[serving]"`.'
        )


async def engine_stats_of(engine: Any) -> dict[str, Any]:
    """The counters of a running engine process (`vlmprep.serving.runners.engine_stats`).

    Args:
        engine (`EngineClient`): the model's client.

    Returns:
        `dict`
    """
    return await asyncio.wait_for(engine._send_request("vlmprep_call", args=("stats", ())), STATS_TIMEOUT_S)


async def served_stats(model_manager: Any, chat_handler: Any) -> dict[str, dict[str, Any]]:
    """Each running model's engine counters, with this API server's media cache's.

    Args:
        model_manager (`ModelManager`): the server's models.
        chat_handler (`VisionPrepChatCompletionHandler`): holds the media cache.

    Returns:
        `dict[str, dict]`: model name -> its counters.
    """
    import dataclasses

    media_cache = getattr(chat_handler, "media_cache", None)
    media = dataclasses.asdict(media_cache.stats) if media_cache is not None else None
    stats = {}
    for name, engine in list(model_manager.engines.items()):
        if not engine.process_running or engine.is_dead:
            continue
        try:
            stats[name] = {**await engine_stats_of(engine), "media_cache": media}
        except Exception as error:  # a stopping server reports what it can
            logger.warning("The counters of %s could not be read: %s", name, error)
    return stats
