"""`PromptPlan`: what one `generate` call's prompt holds, worked out once in input preparation.

`plan_prompt` reads the prompt, the cache and the family's facts once: where the prompt starts in the sequence, its
token types, the spans of its items (images, videos), the bidirectional blocks, the positions, and the point prefill
resumes from (after a prefix-cache lookup and, for a caller's cache that ends inside a block, a roll back). Every later
step (encoding, chunk planning, slicing the features per chunk) reads the plan instead of working these out again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from ..cache.recurrent_state import cache_length
from ..utils.logging import get_logger
from .cache_rollback import roll_back_cache
from .encoding import ItemEncoder, SuppliedFeatures
from .prepared import PlannedEncoderOutputs
from .spans import (
    Block,
    ItemSpan,
    blocks_from_prefix,
    blocks_from_runs,
    find_placeholder_spans,
    merge_blocks,
    resolve_resume_point,
    shift_spans,
)
from .validation import check_cache_matches_model, check_sequence_input, check_token_types_place_items

logger = get_logger(__name__)


@dataclass
class PromptPlan:
    """The facts of one call's prompt that every step after input preparation reads.

    Args:
        offset (`int`): sequence position of `input_ids[:, 0]` (non-zero when the caller passes only new tokens).
        prompt_length (`int`): tokens of `input_ids`.
        spans (`list[ItemSpan]`): every item's placeholder spans, every modality, in sequence coordinates.
        blocks (`list[Block]`): bidirectional blocks of every row, and the blocks fed whole (`whole_item_blocks`).
        intervals (`list[tuple[int, int]]`): the blocks of all rows merged: no prefill chunk ends inside one.
        resume_point (`int`): the cache length prefill starts from.
        encoder (`ItemEncoder`): hashes and features of the call's items.
        supplied (`SuppliedFeatures`): features the caller passed instead of pixels, by item index.
        item_hashes (`dict[int, str]`): content hashes already computed (by the prefix-cache lookup).
    """

    offset: int
    prompt_length: int
    spans: list[ItemSpan]
    blocks: list[Block]
    intervals: list[tuple[int, int]]
    resume_point: int
    encoder: ItemEncoder
    supplied: SuppliedFeatures = ({}, {})
    item_hashes: dict[int, str] = field(default_factory=dict)
    # False when the cache holds the tokens before the resume point but not the item states a family caches apart
    # (a restored prefix: the store keeps per-token K/V only): every item is then fed again
    cache_holds_items: bool = True

    @property
    def end(self) -> int:
        """One past the last position of the prompt."""
        return self.offset + self.prompt_length

    def needed_items(self) -> list[int]:
        """The items prefill needs: those with a placeholder after the resume point (the others are in the cache),
        or every item when the cache lacks the item states the family caches apart (`cache_holds_items`)."""
        first = self.resume_point if self.cache_holds_items else 0
        return sorted({span.item_index for span in self.spans if span.end > first})


def plan_prompt(
    model,
    input_ids: torch.Tensor,
    model_kwargs: dict[str, Any],
    generation_config,
    salt: str | None = None,
    prefix_request=None,
    supplied: dict | None = None,
    item_hints: dict | None = None,
) -> PromptPlan:
    """Check a call's inputs against its prompt and cache, and plan its prefill.

    `model_kwargs` is completed on the way, as the forward needs it: token types padded, multimodal
    positions, and the cache (restored from the prefix cache, or rolled back out of a bidirectional block).

    Args:
        model: the drop-in model.
        input_ids (`torch.Tensor` of shape `(batch_size, prompt_length)`): the prompt.
        model_kwargs (`dict[str, Any]`): the call's inputs.
        generation_config: the call's generation config.
        salt (`str`, *optional*): the call's cache salt.
        prefix_request (`PrefixRequest`, *optional*): the call's prefix-cache request.
        supplied (`dict`, *optional*): `mm_encoder_outputs` the caller passed.
        item_hints (`dict`, *optional*): the caller's hints for items' content hashes (`vlmprep.cache.hash_hints`).

    Returns:
        `PromptPlan`
    """
    batch_size, prompt_length = input_ids.shape

    # 4.1 The cache: what it holds, and that it can belong to this model and this prompt.
    cache = model_kwargs.get("cache")
    past_length = cache_length(cache) if cache is not None else 0
    if cache is not None:
        check_cache_matches_model(cache, model.config, batch_size, model.cached_key_shape())
    offset = _prompt_offset(model_kwargs, generation_config, batch_size, prompt_length, past_length)

    # 4.2 Token types: the caller's, padded over the cached part or the generated tokens (none: causal, as upstream).
    token_types = _prepare_token_types(model, input_ids, model_kwargs, offset)

    # 4.3 Spans, and which items the prompt refers to.
    main_spans = supplied.prepared.spans if isinstance(supplied, PlannedEncoderOutputs) else None
    spans = shift_spans(find_item_spans(model, input_ids, model_kwargs, token_types, main_spans), offset)
    encoder = ItemEncoder(model, model_kwargs, spans, salt, item_hints)
    given = encoder.supplied_features(supplied)
    if isinstance(supplied, PlannedEncoderOutputs):
        _check_assistant_has_every_item(spans, past_length, set(given[0]), supplied.prepared.resume_point)
    check_items_match_spans(model, spans, model_kwargs, past_length, set(given[0]))
    if given[0]:
        prefix_request = None  # features without pixels have no content hash to key a stored prefix by
    _set_multimodal_positions(model, input_ids, model_kwargs, offset)

    whole_item_blocks = model.whole_item_blocks(spans)  # fed whole, as bidirectional blocks are (Ovis2.5's)
    blocks = bidirectional_blocks(model, token_types, model_kwargs.get("attention_mask")) + whole_item_blocks
    plan = PromptPlan(offset, prompt_length, spans, blocks, merge_blocks(blocks), past_length, encoder, given)

    # 4.4 A prefix-cache hit becomes the cache (when the caller passed none), with its exact resume point;
    # 4.5 otherwise the caller's cache: resume never strictly inside a bidirectional block.
    if prefix_request is not None and cache is not None:
        logger.warning_once(
            "The prefix cache is not used when a `cache` is passed: the call resumes from that cache as it is."
        )
    if prefix_request is not None and cache is None and prefix_request.applies(model, generation_config, batch_size):
        plan.item_hashes = encoder.hashes(sorted({span.item_index for span in spans}))
        model_kwargs["cache"], plan.resume_point = prefix_request.restore(
            model, input_ids, model_kwargs, plan, salt, generation_config
        )
        if whole_item_blocks:
            # The store resumes one row inside a block whose KV it holds exact; a block fed whole needs its forward
            # whole too (Ovis2.5 embeds an end token as its item's only in a forward that feeds the item)
            plan.resume_point = _resume_in_callers_cache(
                model_kwargs["cache"], plan.resume_point, 0, merge_blocks(whole_item_blocks)
            )
    else:
        plan.resume_point = _resume_in_callers_cache(cache, past_length, offset, plan.intervals)
    if plan.resume_point > 0:
        cached_items = Counter(span.row for span in spans if span.end <= plan.resume_point)
        most = max(cached_items.values(), default=0)
        cross_attention = model.vision_facts.cross_attention
        # States every forward reads are in no cache layer (IDEFICS): the tokens after the resume point read them all
        every_forward = cross_attention is not None and cross_attention.every_forward
        plan.cache_holds_items = not every_forward and model.cache_holds_item_states(model_kwargs.get("cache"), most)
    return plan


def _set_multimodal_positions(model, input_ids: torch.Tensor, model_kwargs: dict[str, Any], offset: int) -> None:
    # The family's multimodal positions of the whole prompt, as `position_ids` (none for a decoder that ignores them).
    prompt_length = input_ids.shape[1]
    position_ids = model.vision_position_ids(input_ids, model_kwargs)
    if position_ids is not None:
        if position_ids.shape[-1] != offset + prompt_length:
            raise ValueError(
                "This model's multimodal positions are computed from the whole prompt, but only the "
                f"{prompt_length} tokens after the {offset} cached ones were passed. Pass the whole conversation "
                "as `input_ids` (with its pixel inputs and token types) together with the cache."
            )
        model_kwargs["position_ids"] = position_ids
    if model.vision_facts.positions_from_cache_length:
        # The decoder ignores them (its positions count padding): keys must not take them for the real ones
        model_kwargs.pop("position_ids", None)


def _runs_per_item(spans: list[ItemSpan], modality: str) -> list[list[int]] | None:
    # Each item's run lengths, in item order, as `item_token_counts` states pieces
    runs: dict[int, list[int]] = {}
    for span in sorted(spans, key=lambda span: (span.item_index, span.feature_start)):
        if span.modality == modality:
            runs.setdefault(span.item_index, []).append(span.end - span.start)
    return [runs[index] for index in sorted(runs)] or None


def _resume_in_callers_cache(cache, past_length: int, offset: int, intervals) -> int:
    # Where prefill resumes on the caller's cache: at its end, or rolled back to the start of the block it cuts.
    resume_point = resolve_resume_point(past_length, intervals)
    if resume_point < offset:
        raise ValueError(
            f"The cache ends at position {past_length}, inside a block fed whole (bidirectional, or an item with its "
            f"start and end tokens) that starts at {resume_point}, and only the tokens after the cache were passed, "
            "so the block cannot be recomputed whole. Pass the whole prompt as `input_ids` (with its attention mask)."
        )
    if resume_point < past_length:
        resume_point = roll_back_cache(cache, past_length, resume_point)
    return resume_point


def _check_assistant_has_every_item(spans: list[ItemSpan], past_length: int, given: set[int], main_resume: int):
    # A drop-in assistant reads the main model's features, which leave out the items inside the main model's cache:
    # an assistant whose own cache does not hold them has nothing to fill their placeholders with.
    missing = sorted({span.item_index for span in spans if span.end > past_length} - given)
    if missing:
        raise ValueError(
            f"This model is a vlmprep assistant (`assistant_model=`) handed the main model's features, which leave out "
            f"the {len(missing)} item(s) inside the main model's cache (its first {main_resume} tokens), while this "
            "assistant starts from an empty cache. Call the main model without a cache that holds images, or use "
            "prompt lookup (`prompt_lookup_num_tokens`) or a transformers assistant."
        )


def _prompt_offset(
    model_kwargs: dict[str, Any], generation_config, batch_size: int, prompt_length: int, past_length: int
) -> int:
    # A caller may pass only the new tokens with a mask covering cache + new tokens (a transformers idiom).
    attention_mask = model_kwargs.get("attention_mask")
    mask_length = attention_mask.shape[-1] if attention_mask is not None else None
    # `generate` drops an all-ones mask before input preparation and keeps only its length
    mask_length = mask_length or getattr(generation_config, "_mask_length", None) or prompt_length
    offset = past_length if past_length and mask_length == past_length + prompt_length else 0
    if attention_mask is None and mask_length not in (prompt_length, offset + prompt_length):
        raise ValueError(
            f"`attention_mask` has shape {(batch_size, mask_length)} but `input_ids` needs "
            f"({batch_size}, {prompt_length}). Pass the `attention_mask` the processor returned together with these "
            "`input_ids` (same batch and padding)."
        )
    check_sequence_input("attention_mask", attention_mask, batch_size, {prompt_length, offset + prompt_length})
    if prompt_length == 0:
        raise ValueError("`input_ids` is empty: pass at least one prompt token (e.g. the BOS token).")
    if offset == 0 and past_length >= prompt_length:
        raise ValueError(
            f"The cache already holds {past_length} tokens but the prompt has {prompt_length}: at least the last "
            "prompt token must be computed to get logits. Pass the cache of a shorter prefix of this prompt "
            "(e.g. `cache.crop(...)`), or no cache."
        )
    return offset


def _prepare_token_types(
    model, input_ids: torch.Tensor, model_kwargs: dict[str, Any], offset: int
) -> torch.Tensor | None:
    facts = model.vision_facts
    batch_size, prompt_length = input_ids.shape
    token_types = model_kwargs.get(facts.token_type_key)
    given = token_types.shape[-1] if token_types is not None and token_types.ndim == 2 else None
    if given is not None and given < prompt_length:
        # `input_ids` grew past the types (generated tokens appended to ids and mask only, as transformers' own
        # continuation idiom does): the tokens past them are what generation appends, text or suffix.
        fill = 1 if facts.bidirectional == "prefix" else 0
        token_types = torch.nn.functional.pad(token_types, (0, prompt_length - token_types.shape[-1]), value=fill)
        model_kwargs[facts.token_type_key] = token_types
    check_sequence_input(facts.token_type_key, token_types, batch_size, {prompt_length, offset + prompt_length})
    if facts.bidirectional is None or token_types is None:
        # Left out, they leave upstream's forward causal everywhere (no bidirectional block): so here too.
        return token_types
    check_token_types_place_items(facts, model.config, input_ids, token_types, offset, given)
    if token_types.shape[-1] < offset + prompt_length:
        token_types = torch.nn.functional.pad(token_types, (offset, 0))  # cached part: text
    model_kwargs[facts.token_type_key] = token_types
    return token_types


def bidirectional_blocks(model, token_types: torch.Tensor | None, attention_mask: torch.Tensor | None) -> list[Block]:
    """The bidirectional blocks of every row: image runs (Gemma3), the unpadded prefix (PaliGemma), or one block from
    the first item token to the last (Molmo2)."""
    bidirectional = model.vision_facts.bidirectional
    if bidirectional is None or token_types is None:
        return []
    if bidirectional in ("image", "items"):
        block_types = torch.tensor(model.vision_facts.block_token_types, device=token_types.device)
        in_block = torch.isin(token_types, block_types)
        # Molmo2: a cut between two images would leave the first one's KV without the second, so one block spans both
        return blocks_from_runs(in_block) if bidirectional == "image" else blocks_from_prefix(in_block)
    prefix = token_types == 0
    if attention_mask is not None and attention_mask.shape == prefix.shape:
        prefix = prefix & attention_mask.bool()  # padding is masked out, it belongs to no block
    return blocks_from_prefix(prefix)


def find_item_spans(
    model,
    input_ids: torch.Tensor,
    model_kwargs: dict[str, Any],
    token_types: torch.Tensor | None,
    main_spans: list[ItemSpan] | None = None,
) -> list[ItemSpan]:
    """The placeholder spans of every item of every modality in `input_ids` (positions relative to it).

    Items of every modality are numbered together, images first, so features and hashes key on one index. An
    assistant model handed its main model's plan (`main_spans`, the same prompt's) but not the pixel inputs its
    counts need (transformers pops every encoder argument) takes each item's runs from the main model's spans.
    """
    token_type_key = model.vision_facts.token_type_key
    spans: list[ItemSpan] = []
    for modality in model.vision_facts.modalities:
        counts = model.prompt_item_token_counts(input_ids, model_kwargs, modality=modality.name)
        if counts is None and main_spans:
            counts = _runs_per_item(main_spans, modality.name)
        first_index = len({span.item_index for span in spans})
        ids = input_ids
        if modality.token_type is not None and token_types is not None:
            # The placeholder id is shared with another modality: only the positions of this one's type count
            ids = input_ids.masked_fill(token_types[..., -input_ids.shape[-1] :] != modality.token_type, -1)
        elif modality.token_type is not None and modality.name != "image":
            if model.count_items(model_kwargs, modality=modality.name) is not None:
                raise ValueError(
                    f"This model's {modality.name}s share the image placeholder token, so only `{token_type_key}` "
                    f"tells their placeholders apart. Pass `{token_type_key}` as the processor returns it."
                )
            continue  # without token types, shared placeholders are images (what the processor marks)
        spans += find_placeholder_spans(ids, modality.placeholder_id(model.config), counts, modality.name, first_index)
    return sorted(spans, key=lambda span: (span.row, span.start))


def check_items_match_spans(
    model, spans: list[ItemSpan], model_kwargs: dict[str, Any], past_length: int, given: set[int] = frozenset()
) -> None:
    """Raise when the pixel inputs do not match the prompt's placeholder runs (one item per run, in prompt order).

    Args:
        model: the drop-in model.
        spans (`list[ItemSpan]`): the prompt's spans.
        model_kwargs (`dict[str, Any]`): the call's inputs.
        past_length (`int`): tokens in the cache (items wholly inside it need no pixels).
        given (`set[int]`, *optional*): items whose features the caller supplied.
    """
    for modality in model.vision_facts.modalities:
        name = modality.name
        modality_spans = [span for span in spans if span.modality == name]
        has_pixels = any(model_kwargs.get(key) is not None for key in modality.pixel_keys)
        if has_pixels:  # shapes first: a malformed input (a video without its video dimension) would miscount items
            model.check_pixel_inputs(model_kwargs, modality=name)
        num_items = model.count_items(model_kwargs, modality=name)
        if has_pixels and any(span.item_index in given for span in modality_spans):
            raise ValueError(
                f"Both `{modality.pixel_keys[0]}` and `mm_encoder_outputs['{name}']` were passed. Pass one of them: "
                "the pixel inputs (vlmprep encodes them once) or the precomputed encoder outputs."
            )
        if num_items is None:
            uncached = [s for s in modality_spans if s.end > past_length and s.item_index not in given]
            if uncached:
                raise ValueError(
                    f"The prompt has {len(uncached)} {name} placeholder run(s) after the {past_length} cached tokens "
                    f"(first at row {uncached[0].row}, position {uncached[0].start}) but no pixel inputs were passed "
                    f"(transformers would run them as text). Pass `{modality.pixel_keys[0]}` for every {name} of "
                    "the prompt."
                )
            continue
        model.check_item_count(model_kwargs, modality_spans, modality=name)
