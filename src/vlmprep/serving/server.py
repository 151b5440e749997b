"""`VisionPrepServe`: transformers' `Serve` (the `transformers serve` command) running vlmprep's handlers."""

from __future__ import annotations

from typing import Any

import transformers
from transformers.cli.serve import Serve
from transformers.cli.serving.server import build_server

from .batching import VisionPrepGenerationState
from .chat import VisionPrepChatCompletionHandler

__all__ = ["VisionPrepServe"]


class VisionPrepServe(Serve):
    """transformers' `Serve` (the `transformers serve` command); with `continuous_batching`, image chats of a drop-in
    the engine supports run in continuous batching (see the module docstring). Takes `Serve`'s arguments."""

    def start_server(self) -> None:
        """Swaps in vlmprep's state and chat handler, then starts the server as upstream does."""
        if self._generation_state._continuous_batching:
            self._use_image_batching()
        super().start_server()

    def _use_image_batching(self) -> None:
        import uvicorn

        from ..utils._engine_compat import missing_engine_hooks

        problems = missing_engine_hooks(include_server=True)
        if problems:
            # A renamed upstream method would leave an override unused: image chats would run as text, silently
            raise RuntimeError(
                f"transformers {transformers.__version__}'s server or continuous-batching engine lacks what vlmprep "
                "extends: " + "; ".join(problems) + ". Install the transformers version vlmprep supports, or serve "
                "without `--continuous-batching`."
            )

        upstream = self._generation_state
        state = VisionPrepGenerationState(
            continuous_batching=True, compile=upstream._compile, cb_config=upstream._cb_config
        )
        self._generation_state = state
        handlers = (
            self._completion_handler,
            self._response_handler,
            self._transcription_handler,
            self._systemone_handler,
        )
        for handler in handlers:
            handler.generation_state = state  # one engine for all endpoints, as upstream
        self._chat_handler = VisionPrepChatCompletionHandler(
            model_manager=self._model_manager,
            generation_state=state,
            chat_template_kwargs=self._chat_handler.chat_template_kwargs,
        )
        # The app upstream built holds the handlers it was given: build it again around these.
        config = self.server.config
        app = build_server(
            self._model_manager,
            self._chat_handler,
            completion_handler=self._completion_handler,
            response_handler=self._response_handler,
            transcription_handler=self._transcription_handler,
            systemone_handler=self._systemone_handler,
            generation_state=state,
            enable_cors=_has_cors(config.app),
        )
        self.server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_level="info"))


def _has_cors(app: Any) -> bool:
    from fastapi.middleware.cors import CORSMiddleware

    return any(middleware.cls is CORSMiddleware for middleware in app.user_middleware)
