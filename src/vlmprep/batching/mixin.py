"""`ContinuousBatchingMixin`: transformers' continuous batching (`generate_batch`, `init_continuous_batching`,
`generate(..., cache_implementation="paged")`) for a vlmprep drop-in, with images.

It overrides upstream's `ContinuousMixin` entry points only to hand the engine an `ItemBatchingManager` and requests
that carry their images; scheduling, the paged cache, sampling and outputs stay transformers' own.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import ContinuousBatchingConfig, GenerationConfig
from transformers.generation.continuous_batching.continuous_api import ContinuousBatchingManager

from ..generation.items import select_items
from ..generation.mixin import VLMPREP_GENERATE_KWARGS
from ..generation.plan import check_items_match_spans, find_item_spans
from ..utils.logging import get_logger
from .manager import ItemBatchingManager
from .prompt import ItemPrompt, build_item_prompt, request_input_keys, split_request, token_list
from .support import check_batching_support

logger = get_logger(__name__)


class ContinuousBatchingMixin:
    """Continuous batching with images: part of every drop-in (through `vlmprep.models.base.VisionPrepMixin`).

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep import LlavaForConditionalGeneration
    >>> from vlmprep.testing import random_pixels, tiny_llava_config
    >>> model = LlavaForConditionalGeneration(tiny_llava_config()).eval()
    >>> request = {"input_ids": [1, 2] + [model.config.image_token_id] * 16 + [3], "pixel_values": random_pixels(1)}
    >>> config = transformers.GenerationConfig(max_new_tokens=3, do_sample=False, eos_token_id=-1)
    >>> engine = transformers.ContinuousBatchingConfig(num_blocks=64, max_batch_tokens=64)  # a small paged cache
    >>> outputs = model.generate_batch(
    ...     [request, [4, 5, 6]], generation_config=config, continuous_batching_config=engine, progress_bar=False
    ... )
    >>> [len(output.generated_tokens) for output in outputs.values()]
    [3, 3]

    ```
    """

    @torch.no_grad()
    def init_continuous_batching(
        self,
        generation_config: GenerationConfig | None = None,
        continuous_batching_config: ContinuousBatchingConfig | None = None,
        workload_hints=None,
    ) -> ItemBatchingManager:
        """Upstream's `init_continuous_batching`, returning an `ItemBatchingManager` (requests may carry images).

        Args:
            generation_config (`GenerationConfig`, *optional*): defaults to the model's.
            continuous_batching_config (`ContinuousBatchingConfig`, *optional*): the engine's configuration.
            workload_hints (`WorkloadHints`, *optional*): as upstream.

        Returns:
            `ItemBatchingManager`
        """
        check_batching_support(self, with_items=False)  # requests with images are checked as they come
        cached = getattr(self, "_cached_continuous_batching_manager", None)
        if isinstance(cached, ItemBatchingManager):
            return super().init_continuous_batching(generation_config, continuous_batching_config, workload_hints)
        if isinstance(cached, ContinuousBatchingManager):
            self.destroy_cached_continuous_batching_manager()  # a text-only manager kept by an earlier session
        generation_config = generation_config if generation_config is not None else self.generation_config
        if generation_config is None:
            raise ValueError("A GenerationConfig must be provided or set in the model.")
        if generation_config.eos_token_id is None:
            # Upstream sets it on the caller's config; a copy leaves the caller's untouched.
            logger.warning("`eos_token_id` not set in GenerationConfig. Setting to -1 (disabled).")
            generation_config = copy.deepcopy(generation_config)
            generation_config.eos_token_id = -1
        if continuous_batching_config is None:
            # As upstream: a config carried by the generation config is still honoured (deprecated there).
            carried = getattr(generation_config, "continuous_batching_config", None)
            if isinstance(carried, ContinuousBatchingConfig):
                logger.warning(
                    "Passing ContinuousBatchingConfig through GenerationConfig is deprecated. Please pass it "
                    "separately using the continuous_batching_config kwarg."
                )
                continuous_batching_config = carried
            else:
                continuous_batching_config = ContinuousBatchingConfig()
        if self.vision_facts.bidirectional == "image" and continuous_batching_config.auto_switch_to_flash:
            # Gemma3's image blocks need the mask sdpa and eager attention get; flash kernels take none
            logger.info("Keeping sdpa/eager attention in continuous batching: image blocks attend bidirectionally.")
            continuous_batching_config = dataclasses.replace(continuous_batching_config, auto_switch_to_flash=False)
        return ItemBatchingManager(
            model=self,
            generation_config=generation_config,
            continuous_batching_config=continuous_batching_config,
            workload_hints=workload_hints,
        )

    @torch.no_grad()
    def generate_batch(self, inputs: Sequence, *args, **kwargs) -> dict:
        """Upstream's `generate_batch`, where each input may be one request's processor output.

        Args:
            inputs (`list`): per request, a list of token ids, or a dict with `input_ids` and that request's pixel
                inputs (`pixel_values`, grids, ...), as its processor returns them. A request that fails its checks
                gets a failed output (its `error` says why); the others run.
            cache_salt (`str`, *optional*): isolates these requests' shared blocks and encoder-cache entries.
            args, kwargs: everything upstream's `generate_batch` takes. Pixel inputs passed here (as
                `generate(..., cache_implementation="paged")` does) belong to the rows of `inputs`, in placeholder
                order.

        Returns:
            `dict[str, GenerationOutput]`: what upstream returns, with the real placeholder ids in `prompt_ids`.
        """
        check_batching_support(self, with_items=False)  # requests with images are checked one by one
        # A drop-in's own `generate` may forward its vlmprep kwargs; of those only the salt concerns the engine.
        salt = {key: kwargs.pop(key) for key in VLMPREP_GENERATE_KWARGS if key in kwargs}.get("cache_salt")
        request_keys = request_input_keys(self.vision_facts)
        shared = {key: kwargs.pop(key) for key in list(kwargs) if key in request_keys}
        shared.pop("input_ids", None)  # `generate` passes the prompt both as `inputs` and `input_ids`
        if shared:
            prompts = self._rows_as_prompts(inputs, shared, salt)
        else:
            prompts = [self._request_as_prompt(item, salt) for item in inputs]
        return super().generate_batch(prompts, *args, **kwargs)

    def _request_as_prompt(self, item: Any, salt: str | None) -> ItemPrompt:
        # A bad request becomes a prompt carrying its error, so it fails alone when it is queued.
        try:
            if isinstance(item, Mapping):
                return build_item_prompt(self, *split_request(item), salt)
            return build_item_prompt(self, item, {}, salt)
        except (ValueError, TypeError) as error:
            return ItemPrompt([], error=str(error))

    def _rows_as_prompts(self, rows: Sequence, inputs: dict[str, Any], salt: str | None) -> list[ItemPrompt]:
        # `generate(..., cache_implementation="paged")`: one batch of equal-length rows and the pixel inputs of all
        # of them, in placeholder order; each row becomes a request with its own images.
        rows = [token_list(row) for row in rows]
        attention_mask = inputs.pop("attention_mask", None)
        if attention_mask is not None and not bool(torch.as_tensor(attention_mask).bool().all()):
            raise ValueError(
                "`generate(..., cache_implementation='paged')` runs each row as its own request and cannot drop "
                "padding. Pass unpadded prompts: `model.generate_batch([...])` with one dict per request."
            )
        batch = torch.tensor(rows)
        token_type_key = self.vision_facts.token_type_key
        token_types = inputs.get(token_type_key)
        spans = find_item_spans(self, batch, inputs, token_types)
        check_items_match_spans(self, spans, inputs, past_length=0)
        prompts = []
        for row, ids in enumerate(rows):
            # Each row keeps the caller's token types, as `generate` uses them (none: causal, as upstream)
            row_inputs = {} if token_types is None else {token_type_key: torch.as_tensor(token_types)[row : row + 1]}
            for modality in self.vision_facts.modalities:
                items = sorted({s.input_index for s in spans if s.row == row and s.modality == modality.name})
                if items:
                    row_inputs.update(self.select_item_inputs(inputs, items, modality=modality.name))
                    # Position inputs (never the encoder's) go with the row's items too, in the same order
                    for key in modality.position_keys:
                        if inputs.get(key) is not None:
                            row_inputs[key] = select_items(inputs[key], items)
            prompts.append(build_item_prompt(self, ids, row_inputs, salt))
        return prompts
