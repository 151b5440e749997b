"""`ItemBatchingManager`: transformers' continuous-batching manager, with requests that carry images.

Four of upstream's manager hooks are extended, each delegating to upstream for everything text-only:

1. `add_request`: a request's pixel inputs are checked, hashed and stored on its `ItemRequestState`; its prompt
   carries placeholder keys, so prefix sharing keys blocks on image content (`vlmprep.batching.prompt`).
2. `_generation_loop_body`: before each loop turn drains the input queue, the queued requests are admitted: their
   images are encoded, all of them in one batched vision call (`vlmprep.batching.admission`). Requests with images
   wait in a queue of their own until then, so upstream never schedules one before its images are encoded; a request
   whose images fail fails alone.
3. `_generation_step`: a step whose slices hold placeholders gets their feature rows (`mm_encoder_outputs`) and its
   real placeholder ids, and runs eagerly (a captured graph or a compiled forward has no image inputs); every other
   step is upstream's own. For Gemma3 the step's mask is opened inside each image block.
4. `_create_batch_processor`: for Gemma3, the scheduler never ends a slice inside an image block
   (`vlmprep.batching.blocks`).

Before new requests look for shared pages, the model's identity (`vlmprep.cache.identity.cache_identity`) is checked:
after a weight change no page made before it is shared (upstream's own engine would share them, text pages too).
"""

from __future__ import annotations

import queue
from collections.abc import Mapping
from typing import Any

import torch
from transformers.generation.continuous_batching.continuous_api import (
    ContinuousBatchingManager,
    ContinuousBatchProcessor,
)
from transformers.generation.continuous_batching.input_outputs import ContinuousBatchingAsyncIOs
from transformers.generation.continuous_batching.utils import stream_context

from ..cache.identity import cache_identity
from ..utils.logging import get_logger
from .admission import encode_admitted
from .batch_rows import restore_placeholders, step_encoder_outputs, step_position_ids
from .blocks import block_admission_error, holds_back_inside_a_block, install_block_aware_scheduler, open_block_masks
from .prompt import ItemPrompt, build_item_prompt, request_input_keys, split_request
from .requests import ItemRequestState

logger = get_logger(__name__)


class ItemBatchingManager(ContinuousBatchingManager):
    """`ContinuousBatchingManager` whose requests may carry images. Made by `model.init_continuous_batching()`.

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep import LlavaForConditionalGeneration
    >>> from vlmprep.batching import ItemBatchingManager
    >>> from vlmprep.testing import tiny_llava_config
    >>> model = LlavaForConditionalGeneration(tiny_llava_config()).eval()
    >>> config = transformers.GenerationConfig(max_new_tokens=2, do_sample=False, eos_token_id=-1)
    >>> engine = transformers.ContinuousBatchingConfig(num_blocks=64, max_batch_tokens=64)  # a small paged cache
    >>> manager = model.init_continuous_batching(generation_config=config, continuous_batching_config=engine)
    >>> isinstance(manager, ItemBatchingManager)
    True

    ```
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Requests with images, queued by `add_request` (any thread) until the loop thread encodes them
        self._requests_to_admit: queue.Queue[ItemRequestState] = queue.Queue()
        self._pages_identity: tuple | None = None  # the model identity the shared pages were made under

    def add_request(
        self,
        input_ids: list[int] | torch.Tensor | Mapping[str, Any],
        request_id: str | None = None,
        max_new_tokens: int | None = None,
        streaming: bool = False,
        record_timestamps: bool = False,
        eos_token_id: int | list[int] | None = None,
        cache_salt: str | None = None,
        **kwargs: Any,
    ) -> str | None:
        """Queue one request; upstream's `add_request`, plus the request's pixel inputs.

        Args:
            input_ids (`list[int]`, `torch.Tensor` or `Mapping`):
                the prompt, or one request's processor output (`input_ids` and the pixel inputs of that request).
            request_id, max_new_tokens, streaming, record_timestamps, eos_token_id: as upstream.
            cache_salt (`str`, *optional*): isolates the request's shared blocks and encoder-cache entries.
            kwargs: the request's pixel inputs (`pixel_values`, grids, ...) and upstream's logits-processor kwargs.

        Returns:
            `str` or `None`: the request id (`None` on a TP rank that is not the driver, as upstream).

        Raises:
            `ValueError` or `TypeError`: the request cannot run (see `build_item_prompt`); nothing is queued.
        """
        if isinstance(input_ids, Mapping):
            input_ids, inputs = split_request(input_ids)
            kwargs = {**inputs, **kwargs}
        input_keys = request_input_keys(self.model.vision_facts) - {"input_ids"}
        request_inputs = {key: kwargs.pop(key) for key in list(kwargs) if key in input_keys}
        unknown = sorted(key for key in kwargs if key not in self.logit_processor.supported_keys)
        if unknown:
            # Upstream would queue the request and fail it later in the loop ("Unknown logit_processor_kwargs")
            raise ValueError(
                f"Unknown request inputs {unknown}: neither this model's pixel inputs ({sorted(input_keys)}) nor "
                f"logits-processor kwargs ({sorted(self.logit_processor.supported_keys)}). Check the names."
            )
        if isinstance(input_ids, ItemPrompt):
            prompt = input_ids
        else:
            prompt = build_item_prompt(self.model, input_ids, request_inputs, cache_salt)
        if prompt.items is None and prompt.error is None:
            return super().add_request(
                list(prompt), request_id, max_new_tokens, streaming, record_timestamps, eos_token_id, **kwargs
            )
        if not self.is_tp_driver:
            return None
        refusal = self.background_thread_status.can_accept_new_requests()
        if refusal is not None:
            logger.warning(f"{refusal} A request with images was dropped.")
            return None
        if request_id is None:
            with self._request_lock:
                request_id = f"req_{self._request_counter}"
                self._request_counter += 1
        state = ItemRequestState(
            request_id=request_id,
            initial_tokens=list(prompt),
            num_children=self.num_return_sequences - 1,
            record_timestamps=record_timestamps,
            max_new_tokens=self.generation_config.max_new_tokens if max_new_tokens is None else max_new_tokens,
            eos_token_id=self.generation_config.eos_token_id if eos_token_id is None else eos_token_id,
            streaming=streaming,
            logit_processor_kwargs=kwargs,
            items=prompt.items,
        )
        if prompt.error is not None:
            # A request of `generate_batch` that failed its checks: it gets its failed output, the others run.
            self._fail(state, ValueError(prompt.error))
            return request_id
        # Not upstream's queue yet: its loop drains that queue at any time, and would schedule a request whose images
        # are not encoded. The loop thread moves it there once encoded (`_admit_queued_requests`).
        self._requests_to_admit.put(state, block=True, timeout=10)
        self._wake_up_loop.set()
        return request_id

    # -- The generation loop (background thread) -----------------------------------------------------------------

    def _create_batch_processor(self) -> ContinuousBatchProcessor:
        processor = super()._create_batch_processor()
        if self.model.vision_facts.bidirectional == "image":
            install_block_aware_scheduler(processor)  # no slice may end inside an image block
        return processor

    def _generation_loop_body(self, batch_processor, bootstrapping: bool) -> bool:
        # Upstream drains the input queue at the start of `prepare_next_batch`: admit what is queued first.
        self._admit_queued_requests(batch_processor)
        if not self.input_queue.empty():  # new requests will look for shared pages: only pages of these weights
            self._forget_pages_of_other_weights(batch_processor)
        return super()._generation_loop_body(batch_processor, bootstrapping)

    def _forget_pages_of_other_weights(self, batch_processor: ContinuousBatchProcessor) -> None:
        # Upstream keys shared pages on token ids alone (and vlmprep's placeholder keys on image content): after a
        # weight change (a reload into a manager kept alive) they would serve KV of the old weights. When the model's
        # identity changed, every page is forgotten for sharing: cached ones go back to the pool, and the hashes of
        # pages still held by running requests are dropped.
        identity = cache_identity(self.model, part="model")
        previous, self._pages_identity = self._pages_identity, identity
        if previous is None or previous == identity:
            return
        logger.info("The model's weights, autocast or mode changed: pages made before are no longer shared.")
        cache = batch_processor.cache
        cache.evict_cached_blocks()
        for allocator in cache.cache_allocators.values():
            allocator.ledger.hash_to_block.clear()
            allocator.ledger.block_to_hash.clear()

    def _admit_queued_requests(self, batch_processor: ContinuousBatchProcessor) -> None:
        # Requests with images wait in their own queue until encoded; only encoded ones reach upstream's queue.
        pending = []
        while True:
            try:
                pending.append(self._requests_to_admit.get_nowait())
            except queue.Empty:
                break
        if not pending:
            return
        # Blocks the engine cannot run exactly (too long for a step, or attention without a mask) fail the request
        refused = [
            block_admission_error(self.model, state.items, batch_processor.max_batch_tokens) for state in pending
        ]
        for state, error in zip(pending, refused, strict=True):
            if error is not None:
                self._fail(state, error)
        pending = [state for state, error in zip(pending, refused, strict=True) if error is None]
        errors = encode_admitted(self.model, [state.items for state in pending])
        for state, error in zip(pending, errors, strict=True):
            if error is not None:
                self._fail(state, error)
                continue
            for sample in _samples_apart(state):
                self.input_queue.put(sample, block=True, timeout=10)

    def _fail(self, state: ItemRequestState, error: Exception) -> None:
        # The parallel samples a request would have forked fail with it: `generate_batch` waits for an output of each
        # (`<id>__child#<i>`), and would wait forever for samples never forked.
        logger.warning(f"Request {state.request_id} failed at admission: {error}")
        for index in range(state.num_children):
            self.output_router.fail_and_deliver(state.fork(f"{state.request_id}__child#{index}"), error)
        self.output_router.fail_and_deliver(state, error)

    def _generation_step(self) -> None:
        # Upstream runs `model(**batch_data)` with ids, 1D positions and the paged cache only. A step holding
        # placeholders also gets their feature rows, a step holding a request with multimodal positions gets them; such
        # a step runs eagerly: graphs and compiled forwards have no such inputs.
        processor = self.batch_processor
        io = processor.inputs_and_outputs
        host = io.io_pairs[io.current_pair].host_io if isinstance(io, ContinuousBatchingAsyncIOs) else io
        input_ids = host.input_ids[: host.num_q_tokens]
        requests = host.requests_in_batch
        outputs = step_encoder_outputs(self.model, requests, input_ids.unsqueeze(0))
        # Multimodal rotary positions reach every step of a request with images, decoding included
        positions = step_position_ids(requests, host.num_q_tokens)
        if outputs is None and positions is None:
            return super()._generation_step()
        restore_placeholders(self.model, input_ids)
        runner = processor.model_runner
        batch_data = io.get_model_kwargs(use_padding=runner.pad_inputs)
        if positions is not None:
            batch_data["position_ids"] = positions.to(batch_data["input_ids"].device)
        if outputs is not None:
            batch_data["mm_encoder_outputs"] = outputs
            # Every image block of the step is whole in it (the scheduler saw to it): open the mask inside each
            open_block_masks(batch_data, requests, processor.sliding_window)
        if runner.supports_logits_to_keep(self.model):
            batch_data["logits_to_keep"] = batch_data["logits_indices"]
        carry_over_ids, previous_output_ids, output_ids = io.get_cb_kwargs()
        with torch.no_grad(), stream_context(io.compute_stream):
            runner._forward_process_and_sample(self.model, batch_data, carry_over_ids, previous_output_ids, output_ids)
        io.retrieve_device_outputs()


def _samples_apart(state: ItemRequestState) -> list[ItemRequestState]:
    """The request, and its parallel samples as requests of their own when forking them would cut an image block.

    Upstream forks the samples after prefilling all but the last prompt token; a prompt ending in a block (an image
    with nothing after it) cannot stop one token short of its end, so each sample is prefilled whole instead, under the
    id upstream would give its fork (as upstream does for forks the cache has no room for). Prefix sharing still
    lets them share the prompt's full pages.
    """
    if state.num_children == 0 or not holds_back_inside_a_block(state.items, len(state.initial_tokens)):
        return [state]
    samples = [state.fork(f"{state.request_id}__child#{index}") for index in range(state.num_children)]
    for sample in (*samples, state):
        sample.num_children = 0
    return [*samples, state]
