"""`VisionPrepServe`: transformers' `Serve` (the `transformers serve` command) running vlmprep's handlers and app.

`Serve` builds its handlers, its generation state and its app in `__init__` and takes no class for any of them, so
`VisionPrepServe` puts its own in place in `start_server`, before uvicorn serves anything:

- `VisionPrepGenerationState` (image chats in the continuous-batching engine, stoppable sequential generations);
- `VisionPrepChatCompletionHandler` under the server's `ServingPolicy`;
- the app of `vlmprep.serving.app.build_app` around them, on upstream's host and port.
"""

from __future__ import annotations

from typing import Any

import transformers
from transformers.cli.serve import Serve

from .app import build_app
from .batching import VisionPrepGenerationState
from .chat import VisionPrepChatCompletionHandler
from .policy import DEFAULT_LIMITS, ServingPolicy

__all__ = ["VisionPrepServe", "check_engine_hooks"]


class VisionPrepServe(Serve):
    """transformers' `Serve`, serving vlmprep's app under `policy` (see the module docstring).

    Args:
        policy (`ServingPolicy`, *optional*, defaults to `DEFAULT_LIMITS`): the media policy and limits.
        *args, **kwargs: `Serve`'s arguments. The server always starts in a thread (upstream's `non_blocking`); without
            `non_blocking=True` this call then waits until it stops, as upstream's would.
    """

    def __init__(self, *args, policy: ServingPolicy = DEFAULT_LIMITS, **kwargs):
        self._policy = policy
        blocking = not kwargs.pop("non_blocking", False)
        # Upstream's blocking start would serve its own app: start through `start_server` (below) in every case.
        super().__init__(*args, non_blocking=True, **kwargs)
        if blocking:
            self._thread.join()

    def start_server(self) -> None:
        """Swaps in vlmprep's state, chat handler and app, then starts the server as upstream does."""
        import uvicorn

        continuous_batching = self._generation_state._continuous_batching
        if continuous_batching:
            check_engine_hooks()
        upstream = self._generation_state
        state = VisionPrepGenerationState(
            continuous_batching=continuous_batching, compile=upstream._compile, cb_config=upstream._cb_config
        )
        self._generation_state = state
        self._chat_handler = VisionPrepChatCompletionHandler(
            model_manager=self._model_manager,
            generation_state=state,
            chat_template_kwargs=self._chat_handler.chat_template_kwargs,
            policy=self._policy,
        )
        config = self.server.config
        app = build_app(self._model_manager, self._chat_handler, state, self._policy, _has_cors(config.app))
        self.server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_level="info"))
        super().start_server()


def check_engine_hooks() -> None:
    """Refuses to start continuous batching when transformers' server or engine lacks a method vlmprep extends.

    Raises:
        `RuntimeError`: naming what is missing.
    """
    from ..utils._engine_compat import missing_engine_hooks

    problems = missing_engine_hooks(include_server=True)
    if problems:
        # A renamed upstream method would leave an override unused: image chats would run as text, silently
        raise RuntimeError(
            f"transformers {transformers.__version__}'s server or continuous-batching engine lacks what vlmprep "
            "extends: " + "; ".join(problems) + ". Install the transformers version vlmprep supports, or serve "
            "without `--continuous-batching`."
        )


def _has_cors(app: Any) -> bool:
    from fastapi.middleware.cors import CORSMiddleware

    return any(middleware.cls is CORSMiddleware for middleware in app.user_middleware)
