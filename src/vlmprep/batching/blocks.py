"""Bidirectional image blocks (Gemma3) in the engine: slices end only at block edges, and each block's mask is open.

An image block's KV is what `generate` computes only when every placeholder of the image attends to every other one
(upstream builds that mask from `token_type_ids`). The engine knows nothing of blocks, so two things are added:

1. **No slice ends inside a block.** The engine's scheduler cuts a prompt at the step's token budget
   (`Scheduler._schedule_request`). `BlockAwareScheduling` lowers that budget to the start of the block the cut would
   fall in; a request whose slice is then empty sits the step out (`_process_candidates` drops it; its prompt is
   untouched and it is scheduled again next step). A block longer than the engine's `max_batch_tokens` never fits in
   one slice, so such a request fails at admission (`block_admission_error`).
2. **The step's mask is open inside each block.** With sdpa or eager attention the engine feeds an additive mask it
   builds causal (and windowed on sliding layers) for every step; `open_block_masks` zeroes it where a query of a
   block meets a key of the same block, within the sliding window on sliding layers, as upstream's mask does
   (`AND(window, OR(causal, block))`). Flash kernels take no mask (they are causal by construction): a model loaded
   with one is refused for images (`check_batching_support`), `init_continuous_batching` keeps the engine from
   switching a Gemma3 to flash by itself, and admission checks it once more (`block_admission_error`).

The scheduler is upstream's own class (FIFO or prefill-first, as configured) with the mixin on top. Upstream picks the
class from a module-level table inside `_create_batch_processor` and gives the one instance to the batch processor
and to its offloading manager; `ItemBatchingManager._create_batch_processor` hands both the block-aware one, built
with the same arguments before any request is scheduled (`install_block_aware_scheduler`).
"""

from __future__ import annotations

import functools

import torch
from transformers.generation.continuous_batching.continuous_api import ContinuousBatchProcessor
from transformers.generation.continuous_batching.requests import RequestStatus
from transformers.generation.continuous_batching.scheduler import Scheduler
from transformers.generation.continuous_batching.utils import attn_mask_is_needed

from ..generation.spans import resolve_resume_point
from .scheduler_swap import swap_scheduler

_SLIDING = "sliding_attention"


class BlockAwareScheduling:
    """Scheduler mixin: a prompt slice never ends strictly inside one of its request's bidirectional blocks."""

    def _schedule_request(
        self, state, request_tokens: list[int], token_budget: int, request_ids_to_remove_from_waiting: set[str]
    ) -> None:
        blocks = _blocks_of(state)
        if blocks and state.status <= RequestStatus.PREFILLING:
            start = state.position_offset  # where `request_tokens` begin in the prompt (after a shared prefix)
            length = min(len(request_tokens), token_budget)
            if state.num_children > 0 and token_budget >= len(request_tokens) - 1:
                length = len(request_tokens) - 1  # upstream holds the last token back to fork after it
            # A cut inside a block moves back to the block start; a slice that starts inside one (a shared prefix
            # ended there) cannot move back, so it is emptied
            token_budget = min(token_budget, max(resolve_resume_point(start + length, blocks), start) - start)
        super()._schedule_request(state, request_tokens, token_budget, request_ids_to_remove_from_waiting)

    def _process_candidates(self, *args, **kwargs):
        scheduled, *rest = super()._process_candidates(*args, **kwargs)
        # An emptied slice holds no token: the request stays active (prefilling) and waits for the next step
        return [future for future in scheduled if future.query_length > 0], *rest


@functools.cache
def _block_aware_class(scheduler_class: type[Scheduler]) -> type[Scheduler]:
    return type(f"BlockAware{scheduler_class.__name__}", (BlockAwareScheduling, scheduler_class), {})


def install_block_aware_scheduler(processor: ContinuousBatchProcessor) -> None:
    """Give a freshly built batch processor (and its offloading manager) the block-aware form of its scheduler.

    Args:
        processor (`ContinuousBatchProcessor`): the engine's batch processor, before it schedules anything.
    """
    scheduler = processor.scheduler
    if isinstance(scheduler, BlockAwareScheduling):
        return  # a processor reused across sessions keeps its scheduler
    swap_scheduler(processor, _block_aware_class(type(scheduler)))


def block_admission_error(model, items, max_batch_tokens: int) -> ValueError | None:
    """Why the engine cannot run a request's bidirectional blocks exactly, or `None` when it can.

    Args:
        model: the drop-in model the engine runs (attention implementation already chosen by the engine).
        items (`RequestItems`): the request's items.
        max_batch_tokens (`int`): the most tokens one step holds.

    Returns:
        `ValueError` or `None`
    """
    if not items.blocks:
        return None
    name = type(model).__name__
    if not attn_mask_is_needed(model.config):
        return ValueError(
            f"{name}'s image placeholders attend to each other bidirectionally, which needs the engine's attention "
            f"mask, but its attention ({model.config._attn_implementation}) takes none. Load the model with "
            "`attn_implementation='sdpa'` (or 'eager') and pass `ContinuousBatchingConfig(auto_switch_to_flash=False)`, "
            "or use `generate`."
        )
    longest = max(end - start for start, end in items.blocks)
    if longest > max_batch_tokens:
        return ValueError(
            f"An image of this request is {longest} placeholder tokens, which attend to each other bidirectionally "
            f"and so must be in one step, but a step holds at most {max_batch_tokens} tokens. Raise "
            "`ContinuousBatchingConfig(max_batch_tokens=...)`."
        )
    return None


def holds_back_inside_a_block(items, prompt_length: int) -> bool:
    """Whether holding back a prompt's last token (to fork parallel samples after it) would cut one of its blocks.

    Upstream prefills all but the last prompt token of a request with `num_return_sequences > 1` and forks after it; a
    prompt whose last block ends the prompt (an image with nothing after it) could then never be scheduled exactly:
    every cut inside the block moves back to its start, and the slice stays empty forever.

    Args:
        items (`RequestItems`): the request's items.
        prompt_length (`int`): tokens in the request's prompt.

    Returns:
        `bool`
    """
    return any(start < prompt_length - 1 < end for start, end in items.blocks)


def open_block_masks(
    batch_data: dict, requests_in_batch: list, sliding_window: int, layer_types: tuple[str, ...] | None = None
) -> None:
    """Open the step's attention mask inside every bidirectional block its slices hold, in place.

    Args:
        batch_data (`dict`): the step's model kwargs (`attention_mask`, `cu_seq_lens_q`, `cu_seq_lens_k`).
        requests_in_batch (`list[FutureRequestState]`): the step's slices, in the order the engine packed them.
        sliding_window (`int`): the window of sliding layers (1 when the model has none).
        layer_types (`tuple[str, ...]`, *optional*):
            the layer types whose masks open (the family's `block_layer_types`); `None` opens every layer's.
    """
    masks = batch_data.get("attention_mask")
    if masks is None:
        return  # refused at admission; a text-only step has no block
    cu_keys = batch_data["cu_seq_lens_k"]
    if not isinstance(masks, dict):  # one layer type: upstream passes its mask alone (its key lengths stay a dict)
        masks = {next(iter(cu_keys)): masks}
    cu_queries = batch_data["cu_seq_lens_q"].tolist()
    key_ends = {layer_type: cu.tolist() for layer_type, cu in cu_keys.items()}
    for index, future_state in enumerate(requests_in_batch):
        state, length = future_state.state, future_state.query_length
        start = state.position_offset - length  # the engine moved the offset past this slice
        for block_start, block_end in _blocks_of(state):
            first, last = max(block_start, start), min(block_end, start + length)
            if first >= last:
                continue
            rows = slice(cu_queries[index] + first - start, cu_queries[index] + last - start)
            for layer_type, mask in masks.items():
                if layer_types is not None and layer_type not in layer_types:
                    continue  # causal on this layer type (Gemma 4's full-attention layers)
                # The slice's own keys are the last `length` of the request's keys (after the cache it reads)
                first_key = key_ends[layer_type][index + 1] - length + first - start
                window = sliding_window if layer_type == _SLIDING else None
                _open(mask[..., rows, first_key : first_key + last - first], window)


def _open(region: torch.Tensor, window: int | None) -> None:
    # region: (1, 1, n, n), the block's queries by its keys, in position order
    size = region.shape[-1]
    inside = torch.ones(size, size, dtype=torch.bool, device=region.device)
    if window is not None:
        inside = inside.triu(1 - window)  # key > query - window: upstream's sliding overlay
    region.masked_fill_(inside, 0.0)


def _blocks_of(state) -> tuple[tuple[int, int], ...]:
    items = getattr(state, "items", None)
    return items.blocks if items is not None else ()
