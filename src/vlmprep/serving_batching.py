"""Image chats in `transformers serve --continuous-batching`: transformers' serving classes, extended from vlmprep.

transformers' server runs continuous batching for text models only: `GenerationState.use_continuous_batching` wants
`Modality.LLM`, and `CBGenerateManager` hands the engine `input_ids` alone. vlmprep's drop-ins make that engine take
images (`vlmprep.batching`), so these subclasses let the server use it for them:

- `VisionPrepGenerationState` also says yes to a drop-in whose images the engine runs exactly (LLaVA, Qwen2-VL,
  Gemma3 with sdpa or eager attention, ...); a family the engine refuses for images (PaliGemma, LFM2-VL, Gemma3 with
  flash attention) keeps the sequential path, as upstream.
- `VisionPrepCBGenerateManager` turns the request's processor output into the engine's prompt with its images
  (checked before anything is queued) and hands it to upstream's streaming / non-streaming code unchanged.
- `VisionPrepChatCompletionHandler` answers a request whose images cannot be decoded, or whose placeholders and
  images do not match, with HTTP 400 naming the problem (upstream: 500); other errors stay server errors.
- `VisionPrepServe` is transformers' `Serve`: it builds the server as upstream does, then, before starting it, gives
  the handlers the state above and rebuilds the app with upstream's `build_server` around the chat handler above.
  `Serve` takes no handler or state class, so this is the one place these classes can be handed to it.

Importing this module needs transformers' serving dependencies (`pip install "vlmprep[serving]"`); `vlmprep serve`
imports it only after checking them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import transformers
from transformers.cli.serve import Serve
from transformers.cli.serving.chat_completion import ChatCompletionHandler
from transformers.cli.serving.server import build_server
from transformers.cli.serving.utils import BaseHandler, CBGenerateManager, GenerationState, Modality

from .utils.logging import get_logger

__all__ = [
    "VisionPrepCBGenerateManager",
    "VisionPrepChatCompletionHandler",
    "VisionPrepGenerationState",
    "VisionPrepServe",
    "engine_images_supported",
    "raised_while_reading_request",
]

logger = get_logger(__name__)


def _bad_request(message: str):
    from fastapi import HTTPException

    return HTTPException(status_code=400, detail=message)


def engine_images_supported(model: Any) -> bool:
    """Whether transformers' continuous-batching engine runs `model`'s image requests exactly (through vlmprep).

    Args:
        model (`PreTrainedModel`): a loaded model.

    Returns:
        `bool`: `True` for a vlmprep drop-in of a family the engine supports with images.
    """
    from .batching import check_batching_support

    try:
        check_batching_support(model, with_items=True)
    except (TypeError, ValueError) as refusal:
        logger.info("Image chats of %s run one after another: %s", type(model).__name__, refusal)
        return False
    return True


class VisionPrepCBGenerateManager(CBGenerateManager):
    """transformers' `CBGenerateManager`, whose requests carry their images into the engine.

    The handler calls `apply_chat_template(..., return_tensors=None)` for continuous batching: a processor then returns
    one-row lists and numpy pixels. Each request becomes the engine's prompt (`vlmprep.batching.build_image_prompt`:
    checked, its images hashed for the encoder cache and prefix sharing) before upstream queues it.
    """

    def generate_streaming(self, model, processor, inputs, gen_config, request_id, response_parser=None):
        """Upstream's streaming generation, with the request's images. Raises HTTP 400 for a request that cannot run."""
        engine_inputs = self._engine_inputs(model, inputs)
        return super().generate_streaming(model, processor, engine_inputs, gen_config, request_id, response_parser)

    async def generate_non_streaming(self, model, processor, inputs, gen_config, request_id):
        """Upstream's non-streaming generation, with the request's images. Raises HTTP 400 for a request that cannot
        run."""
        engine_inputs = self._engine_inputs(model, inputs)
        return await super().generate_non_streaming(model, processor, engine_inputs, gen_config, request_id)

    @staticmethod
    def _engine_inputs(model, inputs: dict) -> dict:
        from .batching import build_image_prompt

        input_ids = inputs["input_ids"]
        if input_ids and isinstance(input_ids[0], list):
            # A processor answers one conversation with one row; upstream's CB path (written for tokenizers, which
            # answer a flat list) counts and decodes `input_ids` as one sequence: give the handler that too.
            (input_ids,) = input_ids
            inputs["input_ids"] = input_ids
        request_inputs = {
            key: torch.as_tensor(np.asarray(value)) for key, value in inputs.items() if key != "input_ids"
        }
        try:
            prompt = build_image_prompt(model, input_ids, request_inputs)
        except (TypeError, ValueError) as error:
            raise _bad_request(str(error)) from error
        return {"input_ids": prompt}


class VisionPrepGenerationState(GenerationState):
    """transformers' `GenerationState`, which also batches image chats of a drop-in the engine supports.

    Args:
        continuous_batching, compile, cb_config: as upstream.
    """

    def use_continuous_batching(self, model, modality: Modality) -> bool:
        """Upstream's answer, and `True` with `--continuous-batching` for a drop-in whose images the engine runs.

        Args:
            model (`PreTrainedModel`): the loaded model.
            modality (`Modality`): its modality, as the model manager detected it.

        Returns:
            `bool`
        """
        if self._continuous_batching and modality != Modality.LLM and engine_images_supported(model):
            return True
        return super().use_continuous_batching(model, modality)

    def get_manager(self, model_id: str, use_cb: bool = False):
        """Upstream's manager for `model_id`; for continuous batching, a `VisionPrepCBGenerateManager`.

        Args:
            model_id (`str`): `'model_id@revision'`.
            use_cb (`bool`, *optional*, defaults to `False`): whether the request runs in continuous batching.

        Returns:
            `BaseGenerateManager`
        """
        if use_cb and (self._cb_manager is None or self._cb_model_id != model_id):
            if self._cb_manager is not None:  # one engine at a time, as upstream: the previous model's stops
                self._cb_manager.stop()
            self._cb_manager = VisionPrepCBGenerateManager(cb_config=self._cb_config)
            self._cb_model_id = model_id
        return super().get_manager(model_id, use_cb=use_cb)


class VisionPrepChatCompletionHandler(ChatCompletionHandler):
    """transformers' chat-completions handler; a request whose images cannot be read or do not match its
    placeholders gets HTTP 400 naming the problem."""

    @staticmethod
    def get_processor_inputs_from_messages(messages: list[dict], modality: Modality) -> list[dict]:
        """Upstream's conversion, with every image URL read here (data URLs, `http(s)://`, `file://` URLs and paths),
        so that an undecodable one is the client's error.

        Args:
            messages (`list[dict]`): OpenAI-format chat messages.
            modality (`Modality`): the model's modality.

        Returns:
            `list[dict]`: processor messages; images as decoded PIL images.
        """
        from transformers.image_utils import load_image

        processor_messages = BaseHandler.get_processor_inputs_from_messages(messages, modality)
        image_number = 0
        for message in processor_messages:
            content = message["content"]
            for item in content if isinstance(content, list) else ():
                if item.get("type") != "image" or "url" not in item:
                    continue
                image_number += 1
                try:
                    item["image"] = load_image(_local_path_of_file_url(item.pop("url")))
                except Exception as error:  # PIL, base64 and file errors alike: the URL is what is wrong
                    raise _bad_request(
                        f"Image {image_number} of the request could not be read ({type(error).__name__}: {error}). "
                        "Send a base64 data URL (`data:image/png;base64,...`) or a URL of a PNG/JPEG image."
                    ) from error
        return processor_messages

    async def handle_request(self, body: dict, request_id: str):
        """Upstream's handling; a `ValueError` raised while the processor reads the request (e.g. more placeholders
        written in the text than images sent) becomes HTTP 400. Any other error (loading the model, generating) is the
        server's and stays one (HTTP 500).

        Args:
            body (`dict`): the OpenAI chat-completion request.
            request_id (`str`): the request's id.

        Returns:
            `StreamingResponse | JSONResponse`
        """
        try:
            return await super().handle_request(body, request_id)
        except ValueError as error:
            if not raised_while_reading_request(error):
                raise
            raise _bad_request(f"The request cannot run: {error}") from error


# The upstream call that turns a request's messages into model inputs (the processor's chat template, tokenizer and
# image processor run inside it): a `ValueError` from within it is about the request.
_REQUEST_READING_CALL = "apply_chat_template"


def raised_while_reading_request(error: BaseException) -> bool:
    """Whether `error` was raised inside the processor's `apply_chat_template` call, which reads the request.

    Upstream's handler does everything in one method (model loading, reading the request, generating), so the place an
    error was raised is what tells a bad request from a server fault.

    Args:
        error (`BaseException`): a caught exception.

    Returns:
        `bool`
    """
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_name == _REQUEST_READING_CALL:
            return True
        traceback = traceback.tb_next
    return False


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

        from .utils._engine_compat import missing_engine_hooks

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


def _local_path_of_file_url(url: str) -> str:
    """`file:///path/image.png` -> `/path/image.png` (transformers' `load_image` reads paths, not file URLs)."""
    if not url.startswith("file://"):
        return url
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    return url2pathname(urlparse(url).path)


def _has_cors(app: Any) -> bool:
    from fastapi.middleware.cors import CORSMiddleware

    return any(middleware.cls is CORSMiddleware for middleware in app.user_middleware)
