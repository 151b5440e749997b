"""What runs in a served model's engine process: transformers' runners, running vlmprep's drop-ins with their caches.

transformers 5.25 serves each model in a process of its own (`EngineClient.run_engine`), which hands every request
to a runner: `GenerateRunner` (one `generate` at a time) or `CBGenerateRunner` (continuous batching). What vlmprep
keeps for a model lives here, beside the model, and only data crosses the queue:

- `VisionPrepGenerateRunner` resumes a drop-in's sequential generations from the process's `PrefixCache` (a chat's
  earlier turns are not prefilled again), under the request's tenant salt, with the API server's names for re-sent
  images (`vlmprep_item_hints`, so their content hashes are not redone);
- `VisionPrepCBGenerateRunner` turns each request's processor output into the engine's prompt with its images
  (`vlmprep.batching.build_item_prompt`: checked, hashed for the encoder cache and page sharing), and sizes the engine
  from the model with pages small enough to share a chat's earlier turns, whatever `--cb-*` flags were given;
- both answer `vlmprep_call` requests: the process's counters (`engine_stats`), and the content parts a client named
  by `uuid` (`vlmprep.serving.item_refs`), which every API server of the model shares this way.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np
import torch
from transformers.cli.serving.utils import CBGenerateRunner, GenerateRunner

from .errors import server_logger

__all__ = [
    "CHAT_ENGINE_PAGE_SIZE",
    "DEFAULT_ENGINE_BATCH_TOKENS",
    "DEFAULT_ENGINE_CACHE_TOKENS",
    "ITEM_HINTS_FIELD",
    "REQUEST_REFUSED",
    "VisionPrepCBGenerateRunner",
    "VisionPrepGenerateRunner",
    "engine_config",
    "engine_images_supported",
    "runner_for",
]

logger = server_logger()

# The engine's size when no `--cb-*` flag sets it: KV for this many tokens (at most 16 whole sequences of the model's
# positions) and this many tokens per forward. Upstream takes a share of the free memory instead (60% of the RAM on a
# CPU), whatever the model needs.
DEFAULT_ENGINE_CACHE_TOKENS = 16384
DEFAULT_ENGINE_BATCH_TOKENS = 2048
# The engine shares whole pages of a prompt with earlier requests; upstream's 256-token pages share nothing of a chat
# whose turns are shorter (issue 28: 0 hits in a 5-turn image chat). Pages of 16 tokens share all but at most 15 tokens
# of the earlier turns, and those are shared too as partly filled pages (`vlmprep.batching.partial_pages`).
CHAT_ENGINE_PAGE_SIZE = 16
_DEFAULT_ENGINE_SEQUENCES = 16
# The generate argument naming a request's re-sent images for their content hashes (`vlmprep.cache.hash_hints`).
ITEM_HINTS_FIELD = "vlmprep_item_hints"
# How a request the engine refuses (placeholders and images that do not match, ...) starts its error's message: a
# streamed answer's error reaches the API server as text only, and this tells it a 400 from a server error.
REQUEST_REFUSED = "the request cannot run: "


def engine_images_supported(model: Any) -> bool:
    """Whether transformers' continuous-batching engine runs `model`'s image requests exactly (through vlmprep).

    Args:
        model (`PreTrainedModel`): a loaded model.

    Returns:
        `bool`: `True` for a vlmprep drop-in of a family the engine supports with images.
    """
    from ..batching import check_batching_support

    try:
        check_batching_support(model, with_items=True)
    except (TypeError, ValueError) as refusal:
        logger.info("Requests to %s run one after another: %s", type(model).__name__, refusal)
        return False
    return True


def engine_config(model: Any, given: Any = None):
    """The continuous-batching engine's configuration for `model`, from the server's `--cb-*` flags (`given`).

    What no flag sets is sized from the model, not from the machine: a KV cache of
    `min(16 * positions, DEFAULT_ENGINE_CACHE_TOKENS)` tokens (`positions`: the text model's `max_position_embeddings`)
    and at most `DEFAULT_ENGINE_BATCH_TOKENS` per forward; upstream takes 60% of the free memory (the RAM on a CPU)
    instead, unless `--cb-max-memory-percent` asks for that. Pages are `CHAT_ENGINE_PAGE_SIZE` tokens unless
    `--cb-block-size` sets them: with upstream's 256-token pages, a server started with `--cb-num-blocks` alone shared
    nothing of a chat's earlier turns (issue 35). `--cb-num-blocks` then counts pages of that size, so the cache holds
    fewer tokens than the same flag did with bigger pages, never more.

    Args:
        model (`PreTrainedModel`): the served model.
        given (`ContinuousBatchingConfig`, *optional*): the server's, when a `--cb-*` flag was given.

    Returns:
        `ContinuousBatchingConfig`
    """
    from transformers import ContinuousBatchingConfig

    config = ContinuousBatchingConfig() if given is None else dataclasses.replace(given)
    if getattr(config, "block_size", None) is None:  # no `--cb-block-size`: the page size is upstream's default
        config.page_size = CHAT_ENGINE_PAGE_SIZE
    if config.max_memory_percent is not None:
        return config  # the user sizes the engine by memory, as upstream does
    positions = getattr(model.config.get_text_config(), "max_position_embeddings", None) or DEFAULT_ENGINE_CACHE_TOKENS
    cache_tokens = min(_DEFAULT_ENGINE_SEQUENCES * positions, DEFAULT_ENGINE_CACHE_TOKENS)
    if config.num_blocks is None:
        config.num_blocks = math.ceil(cache_tokens / config.page_size)
    if config.max_batch_tokens is None:
        config.max_batch_tokens = min(DEFAULT_ENGINE_BATCH_TOKENS, config.num_blocks * config.page_size)
    return config


class EngineServices:
    """What an engine process keeps for vlmprep beside its model, and the `vlmprep_call` requests that reach it.

    Args:
        policy (`ServingPolicy`): the server's caches' sizes.
    """

    def __init__(self, policy: Any):
        from ..cache.prefix_cache import PrefixCache
        from .item_refs import ItemReferences

        self.prefix_cache = PrefixCache(max_bytes=policy.prefix_cache_bytes) if policy.prefix_cache else None
        self.item_references = ItemReferences()
        self.runner: Any = None  # the process's runner, once built
        # (tenant, uuid) -> the version of the data held there: an API server that holds that version already gets no
        # copy of it back (a photo's megabytes through the queue on every turn, otherwise)
        self._item_versions: dict[tuple, int] = {}
        self._next_version = itertools.count(1)

    def call(self, runner: Any, name: str, args: tuple) -> Any:
        """Runs the `vlmprep_call` named `name`: `"stats"`, or `"remember"` / `"recall"` of `ItemReferences` with the
        version of the data (`remember(tenant, uuid, part_type, payload) -> (kept, version)`,
        `recall(tenant, uuid, part_type, known_version) -> (part_type, payload or None when known, version)`)."""
        if name == "stats":
            return engine_stats(runner, self)
        if name == "remember":
            tenant, uuid = args[:2]
            kept = self.item_references.remember(*args)
            version = next(self._next_version) if kept else None
            self._item_versions[(tenant, uuid)] = version
            if len(self._item_versions) > 2 * self.item_references.max_entries:  # forget evicted items' versions
                held = self.item_references.holds
                self._item_versions = {key: kept for key, kept in self._item_versions.items() if held(*key)}
            return kept, version
        if name == "recall":
            tenant, uuid, part_type, known_version = args
            stored_type, payload = self.item_references.recall(tenant, uuid, part_type)
            version = self._item_versions.get((tenant, uuid))
            return stored_type, None if version is not None and version == known_version else payload, version
        raise ValueError(f"unknown vlmprep engine call {name!r}")


def engine_stats(runner: Any, services: EngineServices) -> dict[str, Any]:
    """The counters of an engine process: its model's class and encoder cache, and the process's caches.

    Returns:
        `dict`: `{"class", "drop_in", "runner", "encoder_cache", "prefix_cache", "engine_prefill", "hinted_hashes",
        "item_refs"}`, each counter a dict of its stats dataclass's fields, `None` when off.
    """
    from ..cache.hash_hints import HINTED_HASHES
    from ..generation import VisionPrepGenerationMixin

    def fields(stats: Any) -> dict | None:
        return None if stats is None else dataclasses.asdict(stats)

    model = runner.model
    drop_in = isinstance(model, VisionPrepGenerationMixin)
    encoder_cache = model.encoder_cache if drop_in else None
    manager = getattr(runner, "manager", None)
    return {
        "class": f"{type(model).__module__}.{type(model).__qualname__}",
        "drop_in": drop_in,
        "runner": type(runner).__name__,
        "encoder_cache": fields(encoder_cache.stats if encoder_cache is not None else None),
        "prefix_cache": fields(services.prefix_cache.stats if services.prefix_cache is not None else None),
        "engine_prefill": fields(getattr(manager, "prefill_stats", None)),
        "hinted_hashes": fields(HINTED_HASHES.stats),
        "item_refs": fields(services.item_references.stats),
    }


class _VisionPrepRunner:
    """What both runners add: `EngineServices` and the `vlmprep_call` requests (answered at once, in the engine's
    request loop: a lookup never waits behind a generation)."""

    services: EngineServices

    def vlmprep_call(self, request_id: int, name: str, args: tuple, stream: bool) -> None:
        """Answers a `vlmprep_call` request (see `EngineServices.call`); its result or error ends the request.

        Args:
            request_id (`int`): the request's id.
            name (`str`): what to run.
            args (`tuple`): its arguments (data).
            stream (`bool`): unused (nothing streams).
        """
        try:
            result = self.services.call(self, name, args)
        except (LookupError, ValueError) as error:  # crosses as it is: the API server tells an unknown id by its type
            result = error
        self.send_results([], [], [(request_id, result)])

    def _drop_in(self) -> bool:
        from ..generation import VisionPrepGenerationMixin

        return isinstance(self.model, VisionPrepGenerationMixin)


class VisionPrepGenerateRunner(_VisionPrepRunner, GenerateRunner):
    """transformers' sequential runner, whose drop-in generations resume from the process's `PrefixCache`.

    Args:
        model, processor, send_results: as upstream.
        services (`EngineServices`): the process's caches.
    """

    def __init__(self, model: Any, processor: Any, send_results: Any, services: EngineServices):
        self.services = services
        super().__init__(model, processor, send_results)

    def generate(self, request_id: int, inputs: dict, generation_kwargs: dict, stream: bool) -> None:
        """Upstream's generation, with the tenant's salt, the item hints and the prefix cache for a drop-in."""
        inputs = dict(inputs)
        salt, hints = inputs.pop("cache_salt", None), inputs.pop(ITEM_HINTS_FIELD, None)
        if self._drop_in():  # a transformers class takes none of them
            # An encoder-decoder's decoder KV is no prefix of another prompt's (the drop-in refuses a prefix cache)
            store = None if self.model.config.is_encoder_decoder else self.services.prefix_cache
            extras = {"cache_salt": salt, ITEM_HINTS_FIELD: hints, "prefix_cache": store}
            inputs.update({name: value for name, value in extras.items() if value is not None})
        super().generate(request_id, inputs, generation_kwargs, stream)


class VisionPrepCBGenerateRunner(_VisionPrepRunner, CBGenerateRunner):
    """transformers' continuous-batching runner, whose requests carry their images into the engine.

    Args:
        model, processor, send_results, cb_config, context_length: as upstream.
        services (`EngineServices`): the process's caches.
    """

    def __init__(
        self,
        model: Any,
        processor: Any,
        send_results: Any,
        cb_config: Any,
        context_length: int | None = None,
        services: EngineServices | None = None,
    ):
        self.services = services
        super().__init__(model, processor, send_results, engine_config(model, cb_config), context_length)

    def generate(self, request_id: int, inputs: dict, generation_kwargs: dict, stream: bool) -> None:
        """Upstream's batched generation of the request's engine prompt. Raises `ValueError` (a 400 for the client)
        for a request that cannot run."""
        try:
            prompt = self._engine_prompt(dict(inputs))
        except (TypeError, ValueError) as error:
            raise ValueError(REQUEST_REFUSED + str(error)) from error
        super().generate(request_id, {"input_ids": prompt}, generation_kwargs, stream)

    def _engine_prompt(self, inputs: dict) -> Any:
        from ..batching import build_item_prompt

        input_ids = inputs.pop("input_ids")
        ids = input_ids.tolist() if hasattr(input_ids, "tolist") else list(input_ids)
        if ids and isinstance(ids[0], list):  # one conversation: one row
            (ids,) = ids
        salt = inputs.pop("cache_salt", None)  # the tenant's: its pages are shared only with its own requests
        hints = inputs.pop(ITEM_HINTS_FIELD, None)
        if not self._drop_in():
            return ids  # a transformers class: text only, as upstream
        request_inputs = {key: torch.as_tensor(np.asarray(value)) for key, value in inputs.items()}
        return build_item_prompt(self.model, ids, request_inputs, salt=salt, hints=hints)


def runner_for(model: Any, processor: Any, send_results: Any, services: EngineServices, cb_config: Any = None, **kw):
    """The runner of an engine started with continuous batching: batched for a model whose requests the engine runs
    exactly (a text model, or a drop-in whose images it runs), one after another otherwise, as upstream does.

    Args:
        model, processor, send_results: as upstream's runners take them.
        services (`EngineServices`): the process's caches.
        cb_config (`ContinuousBatchingConfig`, *optional*): the server's `--cb-*` flags.
        **kw: `context_length`.

    Returns:
        `VisionPrepCBGenerateRunner | VisionPrepGenerateRunner`
    """
    from ..generation import VisionPrepGenerationMixin

    if not isinstance(model, VisionPrepGenerationMixin) or engine_images_supported(model):
        return VisionPrepCBGenerateRunner(model, processor, send_results, cb_config, services=services, **kw)
    return VisionPrepGenerateRunner(model, processor, send_results, services)
