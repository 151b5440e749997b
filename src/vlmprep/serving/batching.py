"""Generation in `vlmprep serve`: transformers' generate managers and generation state, extended from vlmprep.

transformers' server runs continuous batching for text models only: `GenerationState.use_continuous_batching` wants
`Modality.LLM`, and `CBGenerateManager` hands the engine `input_ids` alone. vlmprep's drop-ins make that engine take
images (`vlmprep.batching`), so these subclasses let the server use it for them:

- `VisionPrepGenerationState` also says yes to a drop-in whose images the engine runs exactly (LLaVA, Qwen2-VL,
  Gemma3 with sdpa or eager attention, ...); a family the engine refuses for images (PaliGemma, LFM2-VL, Gemma3 with
  flash attention) keeps the sequential path, as upstream. Its managers are the two below, for every request.
- `VisionPrepCBGenerateManager` turns the request's processor output into the engine's prompt with its images
  (checked before anything is queued) and hands it to upstream's streaming / non-streaming code unchanged. Without
  `--cb-*` flags it sizes the engine from the model (`default_engine_config`), not from the machine's free memory.
- `VisionPrepGenerateManager` (the sequential path) can stop a non-streaming generation whose client went away.

Importing this module needs transformers' serving dependencies (`pip install "vlmprep[serving]"`); `vlmprep serve`
imports it only after checking them.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.cli.serving.utils import CBGenerateManager, GenerateManager, GenerationState, Modality

from ..utils.logging import get_logger
from .errors import bad_request

__all__ = [
    "CHAT_ENGINE_PAGE_SIZE",
    "DEFAULT_ENGINE_BATCH_TOKENS",
    "DEFAULT_ENGINE_CACHE_TOKENS",
    "VisionPrepCBGenerateManager",
    "VisionPrepGenerateManager",
    "VisionPrepGenerationState",
    "default_engine_config",
    "engine_images_supported",
]

# The engine's size when no `--cb-*` flag is given: KV for this many tokens (at most 16 whole sequences of the model's
# positions) and this many tokens per forward. Upstream takes a share of the free memory instead (60% of the RAM on a
# CPU), whatever the model needs.
DEFAULT_ENGINE_CACHE_TOKENS = 16384
DEFAULT_ENGINE_BATCH_TOKENS = 2048
# The engine shares whole pages of a prompt with earlier requests; upstream's 256-token pages share nothing of a chat
# whose turns are shorter (issue 28: 0 hits in a 5-turn image chat). Pages of 16 tokens share all but at most 15 tokens
# of the earlier turns (issue 28: turn-5 time to first token 0.20 s -> 0.12 s; docs/benchmarks.md, "A chat through the
# server"), and those are shared too as partly filled pages (`vlmprep.batching.partial_pages`).
CHAT_ENGINE_PAGE_SIZE = 16
_DEFAULT_ENGINE_SEQUENCES = 16

logger = get_logger(__name__)


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
        logger.info("Image chats of %s run one after another: %s", type(model).__name__, refusal)
        return False
    return True


def default_engine_config(model: Any):
    """The continuous-batching engine's size for `model` when the server got no `--cb-*` flag.

    The KV cache holds `min(16 * positions, DEFAULT_ENGINE_CACHE_TOKENS)` tokens (`positions`: the text model's
    `max_position_embeddings`), a forward at most `DEFAULT_ENGINE_BATCH_TOKENS`; grow them with `--cb-num-blocks`
    (pages of `CHAT_ENGINE_PAGE_SIZE` tokens, so that a chat's earlier turns are shared to within a few tokens; or
    `--cb-block-size`), `--cb-max-batch-tokens` or `--cb-max-memory-percent`.

    Args:
        model (`PreTrainedModel`): the served model.

    Returns:
        `ContinuousBatchingConfig`
    """
    from transformers import ContinuousBatchingConfig

    config = ContinuousBatchingConfig(page_size=CHAT_ENGINE_PAGE_SIZE)
    positions = getattr(model.config.get_text_config(), "max_position_embeddings", None) or DEFAULT_ENGINE_CACHE_TOKENS
    cache_tokens = min(_DEFAULT_ENGINE_SEQUENCES * positions, DEFAULT_ENGINE_CACHE_TOKENS)
    config.num_blocks = math.ceil(cache_tokens / config.page_size)
    config.max_batch_tokens = min(DEFAULT_ENGINE_BATCH_TOKENS, cache_tokens)
    return config


class VisionPrepCBGenerateManager(CBGenerateManager):
    """transformers' `CBGenerateManager`, whose requests carry their images into the engine.

    The handler calls `apply_chat_template(..., return_tensors=None)` for continuous batching: a processor then returns
    one-row lists and numpy pixels. Each request becomes the engine's prompt (`vlmprep.batching.build_item_prompt`:
    checked, its images hashed for the encoder cache and prefix sharing) before upstream queues it.
    """

    def init_cb(self, model, gen_config) -> None:
        """Upstream's engine start; without `--cb-*` flags the engine is sized by `default_engine_config`."""
        if self._cb is None and self._cb_config is None:
            self._cb_config = default_engine_config(model)
        super().init_cb(model, gen_config)

    def cancel(self, request_id: str) -> None:
        """Stops the request `request_id` (its client went away); unknown ids are ignored.

        Args:
            request_id (`str`): the id the server gave the request.
        """
        if self._cb is not None:
            self._cb.cancel_request(request_id)

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
        from ..batching import build_item_prompt

        input_ids = inputs["input_ids"]
        if input_ids and isinstance(input_ids[0], list):
            # A processor answers one conversation with one row; upstream's CB path (written for tokenizers, which
            # answer a flat list) counts and decodes `input_ids` as one sequence: give the handler that too.
            (input_ids,) = input_ids
            inputs["input_ids"] = input_ids
        salt = inputs.pop("cache_salt", None)  # the tenant's: its pages are shared only with its own requests
        hints = inputs.pop("vlmprep_item_hints", None)  # re-sent images' names: their hashes are not redone
        request_inputs = {
            key: torch.as_tensor(np.asarray(value)) for key, value in inputs.items() if key != "input_ids"
        }
        try:
            prompt = build_item_prompt(model, input_ids, request_inputs, salt=salt, hints=hints)
        except (TypeError, ValueError) as error:
            raise bad_request(str(error)) from error
        return {"input_ids": prompt}


class _StopWhenSet(StoppingCriteria):
    """Stops `generate` at its next step once `event` is set (another thread sets it)."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


class VisionPrepGenerateManager(GenerateManager):
    """transformers' sequential `GenerateManager`, whose non-streaming generations can be stopped (`cancel`)."""

    def __init__(self):
        super().__init__()
        self._stop_events: dict[str, threading.Event] = {}

    async def generate_non_streaming(self, model, processor, inputs, gen_config, request_id):
        """Upstream's non-streaming generation, which `cancel(request_id)` stops at its next token."""
        event = self._stop_events.setdefault(request_id, threading.Event())
        # Upstream spreads `inputs` into `generate`'s keyword arguments: the stopping criterion travels with them.
        stoppable = {**inputs, "stopping_criteria": StoppingCriteriaList([_StopWhenSet(event)])}
        try:
            return await super().generate_non_streaming(model, processor, stoppable, gen_config, request_id)
        finally:
            self._stop_events.pop(request_id, None)

    def cancel(self, request_id: str) -> None:
        """Stops the request `request_id` (its client went away); unknown ids are ignored.

        Args:
            request_id (`str`): the id the server gave the request.
        """
        event = self._stop_events.get(request_id)
        if event is not None:
            event.set()


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
        if not use_cb and model_id not in self._generate_managers:
            self._generate_managers[model_id] = VisionPrepGenerateManager()
        return super().get_manager(model_id, use_cb=use_cb)
