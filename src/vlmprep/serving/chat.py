"""transformers' chat-completions handler, made safe to expose: checked requests, policed media, work off the event loop.

Upstream's `ChatCompletionHandler.handle_request` validates field names only, renders the chat template with the
processor loading every image URL and path with no policy, then sends the prompt to the model's engine process.
`VisionPrepChatCompletionHandler.handle_request` runs the same steps with upstream's own pieces (`get_engine`,
`get_processor_inputs_from_messages`, `_build_generation_kwargs`, `_check_prompt_length`, `_streaming`,
`_non_streaming`), and adds:

1. `check_chat_request` before anything else (every client error a 4xx, bounded images and new tokens), and the
   generation settings checked against the model's generation config here, not failed in the engine;
2. content parts named by `uuid` (vLLM's convention): the data a part sent once, kept in the engine process for every
   API server of the model (`vlmprep.serving.item_refs`), fills in later parts that send the id alone;
3. image URLs and audio clips read under the server's `ServingPolicy` (`vlmprep.serving.media`, `.audio`) in worker
   threads, images re-sent with the same bytes decoded and processed once (`MediaCache`, per tenant), and the chat
   template rendered with only `chat_template_kwargs` the model's template reads;
4. the tenant (`cache_salt`, and the API key) sent with the prompt: the engine process's caches (prefix store, shared
   pages, encoder cache) are partitioned by it;
5. a streamed request the engine refuses (its images do not fit its placeholders, ...) is a 400, not an error event.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
from collections.abc import Hashable
from typing import Any

from transformers.cli.serving.chat_completion import ChatCompletionHandler
from transformers.cli.serving.utils import BaseHandler, Modality, _StreamError

from .audio import load_request_audio_cached
from .engine_items import EngineItemStore, ItemPayloadMemo, has_item_uuids
from .errors import bad_request, client_error, server_logger, shorten
from .media import MediaRefused, load_request_image_cached
from .media_cache import MediaCache
from .policy import DEFAULT_LIMITS, ServingPolicy
from .processed_images import CachingImageProcessor
from .request_checks import check_chat_request, check_template_kwargs, request_audio_parts, request_image_urls
from .runners import ITEM_HINTS_FIELD, REQUEST_REFUSED

__all__ = ["CACHE_SALT_FIELD", "MAX_BEAMS", "MAX_CACHE_SALT_CHARS", "VisionPrepChatCompletionHandler"]

logger = server_logger()

# The request field that names a tenant's cache partition (as vLLM accepts it), and its longest value.
CACHE_SALT_FIELD = "cache_salt"
MAX_CACHE_SALT_CHARS = 256
# The most beams and returned sequences of one request, in all.
MAX_BEAMS = 8


class VisionPrepChatCompletionHandler(ChatCompletionHandler):
    """transformers' chat-completions handler under a `ServingPolicy` (see the module docstring).

    Args:
        model_manager, generation_state, chat_template_kwargs: as upstream.
        policy (`ServingPolicy`, *optional*, defaults to `DEFAULT_LIMITS`): the media policy and limits.
    """

    def __init__(self, *args, policy: ServingPolicy = DEFAULT_LIMITS, **kwargs):
        super().__init__(*args, **kwargs)
        self.policy = policy
        self.media_cache = MediaCache(policy.media_cache_bytes) if policy.media_cache_bytes else None
        self.item_payloads = (
            ItemPayloadMemo()
        )  # the data of items named by `uuid`, as last sent to or got from engines

    async def handle_request(self, body: dict, request_id: str):
        """Checks the request, reads its media, renders its prompt and generates, as upstream does.

        Args:
            body (`dict`): the OpenAI chat-completion request.
            request_id (`str`): the server's id for the request (never the client's).

        Returns:
            `StreamingResponse | JSONResponse`
        """
        allowed = {*self._valid_params_class.__mutable_keys__, CACHE_SALT_FIELD}
        check_chat_request(body, self.policy, allowed, item_references=True)
        salt = self._tenant_salt(body)
        body = {key: value for key, value in body.items() if key != CACHE_SALT_FIELD}
        self._check_model_name(body)
        try:
            # A model named by the request reads its config and processor first (the Hub): off the event loop
            engine = await asyncio.to_thread(self.model_manager.get_engine, body.get("model"))
        except OSError as error:  # the Hub's "no such repository" among them; a pinned model is loaded at start
            if self.model_manager.force_model is not None:
                raise
            raise client_error(404, f"the model {shorten(body.get('model'), 80)!r} could not be loaded") from error
        check_template_kwargs(body.get("chat_template_kwargs") or {}, _template_text(engine.processor), self.policy)
        messages = await self._resolved_messages(engine, body["messages"], salt)
        inputs = await asyncio.to_thread(self._prompt_inputs, {**body, "messages": messages}, engine, salt)
        self._check_prompt_length(engine, inputs)
        generation_kwargs = self._checked_generation_kwargs(body, engine)
        if salt is not None:
            inputs["cache_salt"] = salt
        self._log_request(request_id, engine, inputs, generation_kwargs, body.get("stream"), body)
        try:
            if body.get("stream"):
                return await self._checked_streaming(request_id, engine, inputs, generation_kwargs, body)
            return await self._non_streaming(request_id, engine, inputs, generation_kwargs, tools=body.get("tools"))
        except ValueError as error:  # the engine refused the request
            raise bad_request(shorten(str(error).removeprefix(REQUEST_REFUSED))) from None
        except asyncio.CancelledError:  # upstream's `CancelOnDisconnect`: the engine stops the request too
            logger.info("A client left before its answer: its generation is stopped.")
            raise

    def body_tenant(self, body: Any) -> Hashable | None:
        """The namespace under which a request body's long strings are recalled (`parse_json_body`): its tenant.

        Args:
            body (`Any`): the parsed body, its long strings replaced by markers.

        Returns:
            `Hashable | None`: the tenant's salt (as `_tenant_salt` gives it, in a tuple), or `None` for a body the
            handler refuses (its strings are neither recalled nor remembered).
        """
        from fastapi import HTTPException

        if not isinstance(body, dict):
            return None
        try:
            return (self._tenant_salt(body),)
        except HTTPException:
            return None

    def _tenant_salt(self, body: dict) -> str | None:
        """The request's cache partition: its `cache_salt` and, with `--api-key`, a digest of the key."""
        salt = body.get(CACHE_SALT_FIELD)
        if salt is not None and (not isinstance(salt, str) or not 0 < len(salt) <= MAX_CACHE_SALT_CHARS):
            raise bad_request(
                f"`{CACHE_SALT_FIELD}` must be a non-empty string of at most {MAX_CACHE_SALT_CHARS} characters"
            )
        parts = []
        if self.policy.api_key:
            parts.append("key:" + hashlib.sha256(self.policy.api_key.encode()).hexdigest()[:32])
        if salt is not None:
            parts.append("salt:" + salt)
        return "/".join(parts) or None

    def _check_model_name(self, body: dict) -> None:
        """A request names the pinned model (or none); a server that is not pinned loads Hub models on request, never
        a path on the server."""
        import os
        import re

        requested, pinned = body.get("model"), self.model_manager.force_model
        if requested is None or requested == pinned:
            return
        if pinned is not None:
            raise bad_request(f"this server serves one model; the request names {shorten(requested, 80)!r}")
        hub_name = re.fullmatch(r"[\w.-]+/[\w.-]+(@[\w./-]+)?(:[\w.-]+\.gguf)?", requested) and ".." not in requested
        if not hub_name or os.path.exists(requested.split("@")[0]):
            raise bad_request("`model` must name a Hub model as `org/name`; local paths are not loaded on request")

    async def _resolved_messages(self, engine: Any, messages: list[dict], salt: str | None) -> list[dict]:
        """The messages with every content part named by `uuid` alone filled in from the engine process's store."""
        from .item_refs import resolve_item_references

        if not has_item_uuids(messages):
            return messages
        store = EngineItemStore(engine, asyncio.get_running_loop(), self.item_payloads)
        return await asyncio.to_thread(resolve_item_references, messages, salt, store)

    def _prompt_inputs(self, body: dict, engine: Any, salt: str | None = None):
        """(In a worker thread) the request's images and audio clips read under the policy, then the chat template
        rendered, as tensors (the engine process turns them into its prompt)."""
        processor, modality = engine.processor, engine.modality
        urls = request_image_urls(body["messages"])
        if urls and modality not in (Modality.VLM, Modality.MULTIMODAL):
            raise bad_request("the request has images, and the model takes text only")
        clips = self._request_audio(body["messages"], processor, modality, salt)
        images, keys = [], {}
        for number, url in enumerate(urls, 1):
            try:
                image, key = load_request_image_cached(url, self.policy, self.media_cache, salt)
            except MediaRefused as refusal:
                raise bad_request(f"image {number} of the request: {refusal}") from None
            images.append(image)
            if key is not None:
                keys[id(image)] = key
        caching = None
        if keys and getattr(processor, "image_processor", None) is not None:
            # The request's own copy of the processor, whose image processor takes re-sent images from the cache
            processor = copy.copy(processor)
            caching = CachingImageProcessor(processor.image_processor, self.media_cache, keys)
            processor.image_processor = caching
        processor_messages = BaseHandler.get_processor_inputs_from_messages(body["messages"], modality)
        pending = {"image": iter(images), "audio": iter(clips)}
        for message in processor_messages:
            for item in message["content"] if isinstance(message["content"], list) else ():
                if item.get("type") in pending:  # the decoded item in place of its URL: the processor reads no URL
                    item.pop("url", None)
                    item[item["type"]] = next(pending[item["type"]])
        try:
            inputs = processor.apply_chat_template(
                processor_messages,
                add_generation_prompt=True,
                tools=self._normalize_tools(body.get("tools")),
                return_tensors="pt",
                return_dict=True,
                tokenize=True,
                **self._chat_template_kwargs(body),
            )
        except Exception as error:
            if not _is_request_error(error):
                raise
            # The template or the processor refused what the request holds (roles, placeholders without images, ...)
            raise bad_request(f"the request cannot run: {type(error).__name__}: {shorten(error)}") from None
        inputs = dict(inputs)
        if caching is not None and caching.item_hints:
            # Re-sent images' processed inputs came from the media cache: their content hashes are not redone
            inputs[ITEM_HINTS_FIELD] = caching.item_hints
        return inputs

    def _request_audio(self, messages: list[dict], processor, modality: Modality, salt: str | None):
        """(In a worker thread) the request's audio clips, decoded under the policy, as float32 mono waveforms at the
        model's sampling rate (what transformers' `load_audio` hands the processor)."""
        parts = request_audio_parts(messages)
        if not parts:
            return []
        feature_extractor = getattr(processor, "audio_processor", None) or getattr(
            processor, "feature_extractor", None
        )
        if modality != Modality.MULTIMODAL or feature_extractor is None:
            raise bad_request("the request has audio clips, and the model takes no audio")
        clips = []
        for number, part in enumerate(parts, 1):
            try:
                waveform, _ = load_request_audio_cached(
                    part, self.policy, feature_extractor.sampling_rate, self.media_cache, salt
                )
            except MediaRefused as refusal:
                raise bad_request(f"audio clip {number} of the request: {refusal}") from None
            clips.append(waveform)
        return clips

    def _checked_generation_kwargs(self, body: dict, engine: Any) -> dict:
        """Upstream's generation settings for the request, checked against the model's generation config, bounded by
        `--max-tokens-limit` and the beams limit: a setting `generate` would refuse is a 400 here, not an error in the
        engine process."""
        from fastapi import HTTPException

        limit = self.policy.max_tokens_limit
        try:
            kwargs = self._build_generation_kwargs(body, engine.generation_config)
            config = copy.deepcopy(engine.generation_config)
            config.update(**{name: value for name, value in kwargs.items() if name != "seed"})
            config.validate()
        except HTTPException:
            raise
        except (ValueError, TypeError) as error:
            raise bad_request(f"invalid generation parameters: {shorten(error)}") from None
        if kwargs.get("max_new_tokens") is None or kwargs["max_new_tokens"] > limit:
            if body.get("generation_config") is not None and "max_new_tokens" in body["generation_config"]:
                raise bad_request(f"`max_new_tokens` is over --max-tokens-limit ({limit})")
            kwargs["max_new_tokens"] = limit  # upstream asks for at least 1024 when the request says nothing
        if (config.num_beams or 1) * (config.num_return_sequences or 1) > MAX_BEAMS:
            raise bad_request(f"at most {MAX_BEAMS} beams and returned sequences in all")
        vocab_size = engine.model_config.get_text_config().vocab_size
        if any(not 0 <= token < vocab_size for tokens in (kwargs.get("sequence_bias") or {}) for token in tokens):
            raise bad_request(f"`logit_bias` names a token id outside the vocabulary (0 to {vocab_size - 1})")
        return kwargs

    async def _checked_streaming(self, request_id: str, engine: Any, inputs: dict, generation_kwargs: dict, body):
        """Upstream's streamed answer, started only once the engine took the request: a request it refuses is a 400,
        not an error event after a 200."""
        started = _FirstOutputEngine(engine)
        response = self._streaming(
            request_id, started, inputs, generation_kwargs, body.get("tools"), body.get("stream_options")
        )
        try:
            first = await started.first_output()
        except asyncio.CancelledError:  # the client left first
            started.cancel()
            raise
        if isinstance(first, _StreamError):
            started.cancel()
            if first.msg.startswith(REQUEST_REFUSED):
                raise bad_request(shorten(first.msg.removeprefix(REQUEST_REFUSED)))
            raise client_error(500, f"the generation failed: {shorten(first.msg)}")
        return response


class _FirstOutputEngine:
    """An `EngineClient` as upstream's `_streaming` uses it, whose stream's first output can be awaited before the
    response starts (`first_output`); the stream then reads it first."""

    def __init__(self, engine: Any):
        self._engine = engine
        self._queue: asyncio.Queue | None = None
        self._streamer: Any = None
        self._first: list = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def generate_streaming(self, inputs: dict, generation_kwargs: dict, response_parser: Any = None):
        self._queue, self._streamer = self._engine.generate_streaming(inputs, generation_kwargs, response_parser)
        return self, self._streamer

    async def first_output(self) -> Any:
        """Waits for the stream's first output (a text, the end, or an error) and keeps it for the stream."""
        if not self._first:
            self._first.append(await self._queue.get())
        return self._first[0]

    def cancel(self) -> None:
        self._streamer.cancel()

    # The queue interface `BaseHandler.read_queue_outputs` reads
    async def get(self) -> Any:
        return self._first.pop() if self._first else await self._queue.get()

    def empty(self) -> bool:
        return not self._first and self._queue.empty()

    def get_nowait(self) -> Any:
        return self._first.pop() if self._first else self._queue.get_nowait()


def _is_request_error(error: Exception) -> bool:
    from jinja2 import TemplateError

    return isinstance(error, (ValueError, TemplateError))


def _template_text(processor) -> str:
    """The model's chat template(s) as one text (a processor or tokenizer may hold several, by name)."""
    tokenizer = getattr(processor, "tokenizer", None)
    templates = [getattr(processor, "chat_template", None), getattr(tokenizer, "chat_template", None)]
    texts = []
    for template in templates:
        texts.extend(template.values() if isinstance(template, dict) else [template] if template else [])
    return "\n".join(str(text) for text in texts)
