"""The HTTP app of `vlmprep serve`: transformers' handlers behind a guard that bounds, authenticates and names requests.

Upstream's `build_server` serves every handler it has, `/load_model` and `/reset` to anyone, takes the client's
`X-Request-ID` as the request's id, and answers a body that is no JSON object with FastAPI's 422, which quotes the
whole input back. `build_app` serves:

- `/health`, `/v1/models` and `/v1/chat/completions` (vlmprep's chat handler);
- `/load_model` and `/reset` only with `--api-key`, when every endpoint needs `Authorization: Bearer <key>`;
- transformers' other endpoints (`/v1/completions`, `/v1/responses`, `/v1/systemone`, `/v1/audio/transcriptions`)
  not at all: they read media and fields without the checks above.

Every request gets the server's own id (`X-Request-ID` in the answer), a body over `--max-request-bytes` is a 413,
every error a short JSON message, and a request whose client leaves is cancelled, its generation with it (upstream's
`CancelOnDisconnect`).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations (`Request`, `dict`) at runtime.

import hmac
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from .errors import MAX_ECHO_CHARS, shorten
from .policy import ServingPolicy
from .request_json import parse_json_body

__all__ = ["build_app"]


def build_app(
    model_manager: Any,
    chat_handler: Any,
    policy: ServingPolicy,
    enable_cors: bool = False,
    before_shutdown: Callable[[], Awaitable[None]] | None = None,
):
    """The FastAPI app of `vlmprep serve` (see the module docstring).

    Args:
        model_manager (`ModelManager`): transformers' model manager (`/health` is a 503 once an engine died).
        chat_handler (`VisionPrepChatCompletionHandler`): answers `/v1/chat/completions`.
        policy (`ServingPolicy`): the limits and the API key.
        enable_cors (`bool`, *optional*, defaults to `False`): permissive CORS, as upstream's flag.
        before_shutdown (`Callable`, *optional*): awaited when the server stops, before the engines are (to read
            their counters).

    Returns:
        `RequestGuard` around the `fastapi.FastAPI` app
    """
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.middleware.cors import CORSMiddleware
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException as AnyHTTPException  # FastAPI's, and the router's 404 and 405
    from transformers.cli.serving.utils import CancelOnDisconnect, EngineDeadError

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        try:
            if before_shutdown is not None:
                await before_shutdown()
        finally:
            model_manager.shutdown()

    app = FastAPI(lifespan=lifespan)
    # The routes below parse JSON bodies with `parse_json_body`: a re-sent data URL is recalled from the media cache's
    # strings of earlier bodies (`ResentBodyTexts`), under the tenant the chat handler reads from the body
    media_cache = getattr(chat_handler, "media_cache", None)
    body_texts = getattr(media_cache, "body_texts", None)
    app.router.route_class = _route_class(body_texts, getattr(chat_handler, "body_tenant", None))

    @app.exception_handler(AnyHTTPException)
    async def _client_error(_request: Request, error: AnyHTTPException):
        return JSONResponse({"error": shorten(error.detail, 3 * MAX_ECHO_CHARS)}, status_code=error.status_code)

    @app.exception_handler(RequestValidationError)
    async def _invalid_body(_request: Request, _error: RequestValidationError):
        return JSONResponse({"error": "the request body must be a JSON object"}, status_code=400)

    @app.exception_handler(ValueError)
    async def _refused(_request: Request, error: ValueError):
        # Upstream's way to say a request is at fault: a model the server does not serve, a prompt over the context
        return JSONResponse({"error": shorten(error, 3 * MAX_ECHO_CHARS)}, status_code=400)

    @app.exception_handler(EngineDeadError)
    async def _engine_dead(_request: Request, _error: EngineDeadError):
        return JSONResponse({"error": "the model's engine stopped; the server must be restarted"}, status_code=503)

    if enable_cors:
        app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request, body: dict):
        return await chat_handler.handle_request(body, request.state.request_id)

    @app.get("/v1/models")
    def list_models():
        return JSONResponse({"object": "list", "data": model_manager.list_models()})

    @app.get("/health")
    def health():
        if model_manager.is_dead:
            return JSONResponse({"status": "unhealthy", "reason": "engine_dead"}, status_code=503)
        return JSONResponse({"status": "ok"})

    if policy.api_key:

        @app.post("/load_model")
        async def load_model(body: dict):
            model = body.get("model")
            if not isinstance(model, str) or not model:
                raise HTTPException(status_code=400, detail="`model` must be a non-empty string")
            return StreamingResponse(model_manager.load_model_streaming(model), media_type="text/event-stream")

        @app.post("/reset")
        def reset():
            model_manager.shutdown()
            return JSONResponse({"status": "ok"})

    app.add_middleware(CancelOnDisconnect)
    return RequestGuard(app, policy)


def _route_class(body_texts: Any = None, body_tenant: Any = None):
    """FastAPI's route class, its requests' JSON read by `parse_json_body` (FastAPI's own content-type rules and
    errors are kept: it calls `Request.json()` exactly where it would parse), with `body_texts` (`ResentBodyTexts`)
    and `body_tenant` (the chat handler's) when given."""
    from fastapi import Request
    from fastapi.routing import APIRoute

    class LiftingRequest(Request):
        async def json(self) -> Any:
            if not hasattr(self, "_json"):
                self._json = parse_json_body(await self.body(), body_texts, body_tenant)
            return self._json

    class LiftingRoute(APIRoute):
        def get_route_handler(self):
            handler = super().get_route_handler()

            async def route_handler(request: Request):
                return await handler(LiftingRequest(request.scope, request.receive))

            return route_handler

    return LiftingRoute


class RequestGuard:
    """ASGI middleware: the API key, the body-size limit and the server's own request id, before any route runs.

    The body is read here (up to `--max-request-bytes`) and handed on whole; the client's later messages (its
    disconnect) still reach the route, so a non-streaming request can notice its client leaving.

    Args:
        app (`ASGI app`): the app to guard.
        policy (`ServingPolicy`): `max_request_bytes` and `api_key`.
    """

    def __init__(self, app: Any, policy: ServingPolicy):
        self.app = app
        self.policy = policy
        self._expected_authorization = f"Bearer {policy.api_key}".encode() if policy.api_key else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self._expected_authorization is not None:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected_authorization):
                return await _answer(send, 401, "a valid `Authorization: Bearer <api key>` header is required")
        chunks, status = await _read_body(receive, self.policy.max_request_bytes)
        if status is not None:
            limit = self.policy.max_request_bytes
            return await _answer(send, status, f"the request body is over --max-request-bytes ({limit})")
        request_id = uuid.uuid4().hex  # never the client's X-Request-ID: the engine keys its requests by it
        scope.setdefault("state", {})["request_id"] = request_id
        pending = list(enumerate(chunks or [b""], 1))

        async def replay():
            # The chunks as they came (joined once, by whoever reads the body: a multi-megabyte copy less)
            if pending:
                number, chunk = pending.pop(0)
                return {"type": "http.request", "body": chunk, "more_body": number < len(chunks)}
            return await receive()

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                message = {**message, "headers": [*headers, (b"x-request-id", request_id.encode())]}
            await send(message)

        await self.app(scope, replay, send_with_id)


async def _read_body(receive, limit: int) -> tuple[list[bytes], int | None]:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return [], 499
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return [], 413
        chunks.append(chunk)
        if not message.get("more_body"):
            return chunks, None


async def _answer(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
