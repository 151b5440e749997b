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
from transformers.cli.serving.utils import CBGenerateManager, GenerationState, Modality

from ..utils.logging import get_logger
from .errors import bad_request

__all__ = ["VisionPrepCBGenerateManager", "VisionPrepGenerationState", "engine_images_supported"]

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
        from ..batching import build_image_prompt

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
            raise bad_request(str(error)) from error
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
