"""transformers' chat-completions handler, made safe to expose: checked requests, policed media, work off the event loop.

Upstream's `ChatCompletionHandler.handle_request` does everything in one coroutine, on the event loop: it reads the
request's fields as it goes (a malformed one is an HTTP 500), loads image URLs and paths with no policy, renders the
chat template, then generates. `VisionPrepChatCompletionHandler.handle_request` runs the same steps, in the same
order, with upstream's own pieces (`_resolve_model`, `get_processor_inputs_from_messages`, `_build_generation_config`,
`_streaming`, `_non_streaming`), and adds:

1. `check_chat_request` before anything else (every client error a 4xx, bounded images and new tokens);
2. the model (when a request names one to load), image URLs and audio clips (under the server's `ServingPolicy`,
   `vlmprep.serving.media` and `vlmprep.serving.audio`: PCM WAV only, at the model's sample rate) read in worker
   threads;
3. the chat template rendered in a worker thread, with only `chat_template_kwargs` the model's template reads;
4. the prompt refused when it is longer than the model's positions;
5. a non-streaming generation stopped when its client disconnects (upstream stops streaming ones only);
6. the server's caches, per tenant (`cache_salt`, and the API key): a drop-in's sequential generations resume from the
   server's `PrefixCache` (a chat's earlier turns are not prefilled again), continuous batching shares pages under the
   tenant's salt, and images re-sent with the same bytes come decoded and processed from the `MediaCache`.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
from collections.abc import Hashable
from typing import Any

from transformers.cli.serving.chat_completion import ChatCompletionHandler
from transformers.cli.serving.utils import BaseHandler, Modality

from ..utils.logging import get_logger
from .audio import load_request_audio_cached
from .errors import bad_request, client_error, shorten
from .media import MediaRefused, load_request_image_cached
from .media_cache import MediaCache
from .policy import DEFAULT_LIMITS, ServingPolicy
from .processed_images import CachingImageProcessor
from .request_checks import check_chat_request, check_template_kwargs, request_audio_parts, request_image_urls

__all__ = ["CACHE_SALT_FIELD", "DISCONNECT_POLL_S", "MAX_CACHE_SALT_CHARS", "VisionPrepChatCompletionHandler"]

logger = get_logger(__name__)

# How often a non-streaming request checks whether its client is still there.
DISCONNECT_POLL_S = 0.25
# The request field that names a tenant's cache partition (as vLLM accepts it), and its longest value.
CACHE_SALT_FIELD = "cache_salt"
# The generate argument naming the request's images for their content hashes (`vlmprep.cache.hash_hints`).
ITEM_HINTS_FIELD = "vlmprep_item_hints"
MAX_CACHE_SALT_CHARS = 256


class VisionPrepChatCompletionHandler(ChatCompletionHandler):
    """transformers' chat-completions handler under a `ServingPolicy` (see the module docstring).

    Args:
        model_manager, generation_state, chat_template_kwargs: as upstream.
        policy (`ServingPolicy`, *optional*, defaults to `DEFAULT_LIMITS`): the media policy and limits.
    """

    def __init__(self, *args, policy: ServingPolicy = DEFAULT_LIMITS, **kwargs):
        from ..cache.prefix_cache import PrefixCache

        super().__init__(*args, **kwargs)
        self.policy = policy
        self._engine_start: asyncio.Lock | None = None
        # One store for every model served: its entries are keyed by model identity and tenant salt
        self.prefix_cache = PrefixCache(max_bytes=policy.prefix_cache_bytes) if policy.prefix_cache else None
        self.media_cache = MediaCache(policy.media_cache_bytes) if policy.media_cache_bytes else None

    async def handle_request(self, body: dict, request_id: str, request: Any = None):
        """Checks the request, reads its images, renders its prompt and generates, as upstream does.

        Args:
            body (`dict`): the OpenAI chat-completion request.
            request_id (`str`): the server's id for the request (never the client's).
            request (`starlette.requests.Request`, *optional*): the HTTP request, to notice its client leaving.

        Returns:
            `StreamingResponse | JSONResponse`
        """
        check_chat_request(body, self.policy, {*self._valid_params_class.__mutable_keys__, CACHE_SALT_FIELD})
        salt = self._tenant_salt(body)
        body = {key: value for key, value in body.items() if key != CACHE_SALT_FIELD}
        self._check_model_name(body)
        try:
            # Loading a model named by the request takes a while: off the event loop (the model manager locks)
            model_id, model, processor = await asyncio.to_thread(self._resolve_model, body)
        except OSError as error:  # the Hub's "no such repository" among them; a pinned model is loaded at start
            if self.model_manager.force_model is not None:
                raise
            raise client_error(404, f"the model {shorten(body.get('model'), 80)!r} could not be loaded") from error
        modality = self.model_manager.get_model_modality(model, processor=processor)
        use_cb = self.generation_state.use_continuous_batching(model, modality)
        logger.warning("[Request received] Model: %s, CB: %s", model_id, use_cb)
        gen_manager = self.generation_state.get_manager(model_id, use_cb=use_cb)
        check_template_kwargs(body.get("chat_template_kwargs") or {}, _template_text(processor), self.policy)
        inputs = await asyncio.to_thread(self._prompt_inputs, body, processor, modality, use_cb, salt)
        if not use_cb:
            inputs = inputs.to(model.device)
        _check_prompt_length(model, inputs["input_ids"])
        gen_config = self._checked_generation_config(body, model, use_cb)
        inputs = self._with_caches(inputs, model, salt, use_cb)
        if use_cb:
            await self._start_engine(gen_manager, model, gen_config)
        arguments = (request_id, model, processor, model_id, inputs, gen_config)
        if body.get("stream"):
            return self._streaming(*arguments, gen_manager=gen_manager, tools=body.get("tools"))
        work = asyncio.ensure_future(self._non_streaming(*arguments, gen_manager=gen_manager, tools=body.get("tools")))
        return await _until_done_or_disconnected(work, request, lambda: gen_manager.cancel(request_id))

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

    def _with_caches(self, inputs, model, salt: str | None, use_cb: bool):
        """The generation inputs with the tenant's salt and (sequential generations) the server's prefix cache."""
        from ..generation import VisionPrepGenerationMixin

        if not isinstance(model, VisionPrepGenerationMixin):
            inputs.pop(ITEM_HINTS_FIELD, None)
            return inputs  # a transformers class takes neither
        if salt is not None:
            inputs["cache_salt"] = salt
        if not use_cb and self.prefix_cache is not None:
            inputs["prefix_cache"] = self.prefix_cache
        return inputs

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

    def _prompt_inputs(self, body: dict, processor, modality: Modality, use_cb: bool, salt: str | None = None):
        """(In a worker thread) the request's images and audio clips read under the policy, then the chat template
        rendered."""
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
        template_kwargs = {**self.chat_template_kwargs, **(body.get("chat_template_kwargs") or {})}
        try:
            inputs = processor.apply_chat_template(
                processor_messages,
                add_generation_prompt=True,
                tools=body.get("tools"),
                return_tensors=None if use_cb else "pt",
                return_dict=True,
                tokenize=True,
                **template_kwargs,
            )
        except Exception as error:
            if not _is_request_error(error):
                raise
            # The template or the processor refused what the request holds (roles, placeholders without images, ...)
            raise bad_request(f"the request cannot run: {type(error).__name__}: {shorten(error)}") from None
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

    def _checked_generation_config(self, body: dict, model, use_cb: bool):
        limit = self.policy.max_tokens_limit
        try:
            config = self._build_generation_config(body, model.generation_config, use_cb=use_cb)
            config.validate()
        except (ValueError, TypeError) as error:
            raise bad_request(f"invalid generation parameters: {shorten(error)}") from None
        if config.max_new_tokens is None or config.max_new_tokens > limit:
            if body.get("generation_config") is not None and config.max_new_tokens is not None:
                raise bad_request(f"`max_new_tokens` is over --max-tokens-limit ({limit})")
            config.max_new_tokens = min(config.max_new_tokens or limit, limit)
        if (config.num_beams or 1) * (config.num_return_sequences or 1) > 8:
            raise bad_request("at most 8 beams and returned sequences in all")
        vocab_size = model.config.get_text_config().vocab_size
        if any(not 0 <= token < vocab_size for tokens in (config.sequence_bias or {}) for token in tokens):
            raise bad_request(f"`logit_bias` names a token id outside the vocabulary (0 to {vocab_size - 1})")
        return config

    async def _start_engine(self, gen_manager, model, gen_config) -> None:
        """Upstream's `init_cb` (the engine's start, which takes a while the first time), off the event loop."""
        if self._engine_start is None:
            self._engine_start = asyncio.Lock()
        async with self._engine_start:  # one start, however many first requests arrive together
            await asyncio.to_thread(gen_manager.init_cb, model, gen_config)


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


def _check_prompt_length(model, input_ids) -> None:
    if hasattr(input_ids, "shape"):
        length = input_ids.shape[-1]
    else:  # continuous batching: lists, one row for a processor, flat for a tokenizer
        length = len(input_ids[0] if input_ids and isinstance(input_ids[0], list) else input_ids)
    positions = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    if positions is not None and length >= positions:
        raise bad_request(f"the prompt is {length} tokens; the model has {positions} positions")


async def _until_done_or_disconnected(work: asyncio.Future, request: Any, cancel) -> Any:
    """`work`'s result; when the client disconnects first (or this coroutine is cancelled), `cancel()` stops the
    generation and `work` is cancelled."""
    from fastapi.responses import JSONResponse

    try:
        while True:
            done, _ = await asyncio.wait({work}, timeout=DISCONNECT_POLL_S)
            if done:
                return work.result()
            if request is not None and await request.is_disconnected():
                logger.info("A client left before its answer: its generation is stopped.")
                cancel()
                work.cancel()
                # Nobody reads it; 499 (nginx's "client closed request") keeps it out of the server-error counts
                return JSONResponse({"error": "the client disconnected"}, status_code=499)
    except asyncio.CancelledError:
        cancel()
        work.cancel()
        raise
