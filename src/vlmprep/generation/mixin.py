"""`VisionPrepGenerationMixin`: the one place that overrides transformers' generation hooks.

`generate` calls the hooks below in this order (numbers follow `GenerationMixin.generate`'s own steps):

0. `generate` itself only splits off the opt-in `prefix_cache` and stores the finished rows afterwards.
1. `_validate_model_kwargs`: vlmprep's own generate kwargs (`cache_salt`) are not model inputs; the language model's
   inputs a family's forward takes through its keyword arguments (`FamilyHooks.language_model_kwargs`) are.
   `_validate_generation_mode`: no assisted decoding on a decoder with a recurrent state (`assisted.py`).
4. `_prepare_position_ids_for_generation`: families with multimodal rope never read `rope_deltas` left on the model.
4. `_maybe_prepare_encoder_kwargs_for_generation`: the items after the cache's length are prepared here: inputs
   checked, the cache rolled back out of any bidirectional block it ends in, features computed once (encoder-cache
   hits, then one batched call). They leave as upstream's `mm_encoder_outputs` (a `PlannedEncoderOutputs`: every
   placeholder's rows after the resume point, and the plan): upstream's one-forward paths stay exact unchanged.
   An encoder-decoder's items are in the encoder's prompt: their features fill its embeddings, and upstream's encoder
   step runs on them (`encoder_prompt.py`).
5. `_expand_inputs_for_generation`: beams and `num_return_sequences` share those features, nothing is re-encoded.
6. `_supports_logits_to_keep`: also where the forward takes `logits_to_keep` through its keyword arguments.
7. `_prepare_static_cache`: a family sizing item-state layers from pixel inputs sees their item count.
9. `_prefill`: chunks are planned from the spans (never ending inside a bidirectional block); each runs through
   upstream's own unchunked prefill with exactly the feature rows of the placeholders in its slice.

Decoding is left to transformers. No request state is kept on the model: everything lives in `model_kwargs`
(Qwen-VL's `rope_deltas` are written for readers after a call, never read).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from transformers import GenerationMixin

from ..cache.identity import check_cache_salt
from ..cache.prefix_cache import PrefixCache
from ..cache.recurrent_state import cache_length
from .assisted import assistant_model_of, check_no_recurrent_state, first_assisted_forward_inputs
from .encoder_prompt import items_in_encoder_prompt, prefill_decoder_in_chunks, prepare_encoder_with_items
from .facts import TOKEN_TYPE_KEYS, VisionFacts
from .hooks import FamilyHooks
from .model_caches import ModelCachesMixin
from .plan import plan_prompt
from .prefix import PrefixRequest
from .prepared import PlannedEncoderOutputs, PreparedItems, containers_of
from .validation import check_no_block_after_cache_in_static_cache, check_prefill_chunk_size

# Keyword arguments of `generate` that belong to vlmprep and never reach the model.
VLMPREP_GENERATE_KWARGS = ("cache_salt", "vlmprep_prefix_request", "vlmprep_item_hints", "vlmprep_assistant_encodes")
# Inputs that run along the sequence, cut at each prefill chunk's end.
CHUNKED_INPUT_KEYS = ("attention_mask", "position_ids", *TOKEN_TYPE_KEYS)


def _chunked_input_axes(facts: VisionFacts) -> dict[str, int]:
    """The inputs cut at each prefill chunk's end, with the axis their sequence runs along: the last, or the one of a
    cross-attention mask (`CrossAttention.mask`).

    Args:
        facts (`VisionFacts`): the family's facts.

    Returns:
        `dict[str, int]`: input name -> sequence axis.
    """
    cross_attention = facts.cross_attention
    mask = [cross_attention.mask] if cross_attention is not None and cross_attention.mask is not None else []
    return dict.fromkeys(CHUNKED_INPUT_KEYS, -1) | dict(mask)


def _run_unchunked(prefill, input_ids: torch.Tensor, generation_config, model_kwargs: dict, is_first_iteration: bool):
    """Upstream's `_prefill` as one forward over `input_ids`, whatever the call's `prefill_chunk_size`."""
    chunk_size = generation_config.prefill_chunk_size
    generation_config.prefill_chunk_size = None
    try:
        return prefill(input_ids, generation_config, model_kwargs, is_first_iteration=is_first_iteration)
    finally:
        generation_config.prefill_chunk_size = chunk_size


class VisionPrepGenerationMixin(ModelCachesMixin, FamilyHooks):
    """Generation mixin for VLMs: the vision encoder runs once, in input preparation, for the images prefill needs.

    It knows nothing of continuous batching: the drop-ins derive from `vlmprep.models.base.VisionPrepMixin`, which adds
    `ContinuousBatchingMixin` (`generate_batch`, `init_continuous_batching`, paged `generate`) to it. A drop-in states
    its `vision_facts`; the family hooks it may override are those of `FamilyHooks`.

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep.generation import VisionFacts, VisionPrepGenerationMixin
    >>> class MyGemma3(VisionPrepGenerationMixin, transformers.Gemma3ForConditionalGeneration):
    ...     vision_facts = VisionFacts(tokens_per_image_attr="mm_tokens_per_image", bidirectional="image")

    ```
    """

    vision_facts: VisionFacts = VisionFacts()

    @classmethod
    def is_custom_code(cls) -> bool:
        # Upstream skips checkpoint key conversions (LLaVA's legacy `language_model.lm_head`) and weight-init rules
        # for classes defined outside `transformers.`; a drop-in runs upstream's modeling code, so it loads as upstream.
        return False

    # -- Step 0: `GenerationMixin.generate` ------------------------------------------------------------------------

    def generate(self, *args, prefix_cache: PrefixCache | None = None, **kwargs):
        """`transformers.GenerationMixin.generate`, plus vlmprep's opt-in `prefix_cache`.

        Args:
            prefix_cache (`PrefixCache`, *optional*):
                resume from the longest stored prefix of the prompt, then store prompt and answer; defaults to
                `model.prefix_cache`. Not used with a `cache`, beams, `num_return_sequences > 1`, train mode or a
                quantized cache; only stored to with hidden states, attentions or assisted decoding (`prefix.py`).
            cache_salt (`str`, *optional*):
                isolates encoder- and prefix-cache entries: entries made under one salt are invisible under another.
            args, kwargs: everything transformers' `generate` takes.

        Returns:
            What transformers' `generate` returns.
        """
        if self.config.is_encoder_decoder and assistant_model_of(args, kwargs) is not None:
            # The assistant encodes the prompt itself, from a copy of the kwargs step 4 leaves (`encoder_prompt.py`)
            kwargs["vlmprep_assistant_encodes"] = True
        store = self._prefix_store_of_call(prefix_cache)  # `None` in train mode (warned)
        if store is None:
            return super().generate(*args, **kwargs)
        request = PrefixRequest(store, assisted=assistant_model_of(args, kwargs) is not None)
        output = super().generate(*args, vlmprep_prefix_request=request, **kwargs)
        request.finish(output if isinstance(output, torch.Tensor) else output.sequences)
        return output

    # -- Step 1: `GenerationMixin._validate_model_kwargs`, `GenerationMixin._validate_generation_mode` -------------

    def _validate_model_kwargs(self, model_kwargs: dict[str, Any]):
        # Replaces the upstream check only to let vlmprep's own kwargs through (they are popped in step 4), and the
        # language model's inputs a forward takes without naming them (upstream checks the forward's names only).
        passed = (*VLMPREP_GENERATE_KWARGS, *self.language_model_kwargs)
        own = {key: model_kwargs.pop(key) for key in passed if key in model_kwargs}
        try:
            return super()._validate_model_kwargs(model_kwargs)
        finally:
            model_kwargs.update(own)

    def _validate_generation_mode(self, generation_mode, generation_config, generation_mode_kwargs):
        check_no_recurrent_state(self, generation_mode)  # before upstream's checks: every version says the same
        return super()._validate_generation_mode(generation_mode, generation_config, generation_mode_kwargs)

    # -- Step 4: `GenerationMixin._prepare_position_ids_for_generation` -------------------------------------------

    def _prepare_position_ids_for_generation(self, inputs_tensor: torch.Tensor, model_kwargs: dict[str, Any]):
        # Families with multimodal rope override this upstream to build positions from `rope_deltas` that an earlier
        # call left on the model: a request in between makes them silently wrong (or unbroadcastable). A family
        # that computes its positions from the prompt alone (`vision_position_ids`, called a few lines later in
        # `_maybe_prepare_encoder_kwargs_for_generation`) gets only transformers' generic positions here.
        computes_own = type(self).vision_position_ids is not VisionPrepGenerationMixin.vision_position_ids
        if computes_own and inputs_tensor.ndim == 2 and not inputs_tensor.is_floating_point():
            return GenerationMixin._prepare_position_ids_for_generation(self, inputs_tensor, model_kwargs)
        return super()._prepare_position_ids_for_generation(inputs_tensor, model_kwargs)

    # -- Step 4: `GenerationMixin._maybe_prepare_encoder_kwargs_for_generation` -----------------------------------

    def _maybe_prepare_encoder_kwargs_for_generation(
        self,
        inputs_tensor: torch.Tensor,
        model_kwargs: dict[str, Any],
        model_input_name: str | None,
        generation_config,
    ) -> dict[str, Any]:
        # Upstream encodes every image passed, whatever the cache already holds; here the prompt is planned first
        # (inputs checked, the cache restored or rolled back) and only the items prefill needs are encoded.
        salt = check_cache_salt(model_kwargs.pop("cache_salt", None))
        request = model_kwargs.pop("vlmprep_prefix_request", None)
        hints = model_kwargs.pop("vlmprep_item_hints", None)  # a server's names for its items (media cache keys)
        assistant_encodes = model_kwargs.pop("vlmprep_assistant_encodes", False)
        if items_in_encoder_prompt(self, model_input_name, model_kwargs):  # then upstream's encoder step on them
            return prepare_encoder_with_items(
                self, inputs_tensor, model_kwargs, generation_config, salt, hints, assistant_encodes
            )
        if model_input_name != "input_ids" or self.config.is_encoder_decoder:
            return super()._maybe_prepare_encoder_kwargs_for_generation(
                inputs_tensor, model_kwargs, model_input_name, generation_config
            )
        supplied = model_kwargs.pop("mm_encoder_outputs", None)
        if isinstance(supplied, PlannedEncoderOutputs):
            # A main model's kwargs, handed to this model as its assistant: its per-item extras (grids) are back
            for key, value in supplied.item_extras.items():
                model_kwargs.setdefault(key, value)
        plan = plan_prompt(self, inputs_tensor, model_kwargs, generation_config, salt, request, supplied, hints)
        features, deepstack = plan.encoder.features(plan.needed_items(), plan.item_hashes, plan.supplied)
        prepared = PreparedItems(
            spans=plan.spans,
            features=features,
            intervals=plan.intervals,
            resume_point=plan.resume_point,
            offset=plan.offset,
            deepstack=deepstack,
            **containers_of(self, plan.spans),
        )
        # Pixel inputs leave the kwargs (the forward reads the features); the other per-item inputs (grids) travel
        # with the features, for an assistant model that needs them for its positions.
        item_extras = {}
        for modality in self.vision_facts.modalities:
            names = plan.encoder.encoder_argument_names(modality.name)
            for key in (*modality.item_keys, *names):
                value = model_kwargs.pop(key, None)
                if value is not None and key not in modality.pixel_keys:
                    item_extras[key] = value
        # As upstream's own `mm_encoder_outputs`: every upstream path running the rest in one forward stays exact
        model_kwargs["mm_encoder_outputs"] = PlannedEncoderOutputs(prepared, plan.end, item_extras, request)
        return model_kwargs

    # -- Step 5: `GenerationMixin._expand_inputs_for_generation` --------------------------------------------------

    def _expand_inputs_for_generation(
        self, expand_size: int = 1, is_encoder_decoder: bool = False, input_ids=None, **model_kwargs
    ):
        # Upstream repeats every tensor input; the prepared images repeat their spans and share the features.
        planned = model_kwargs.get("mm_encoder_outputs")
        if isinstance(planned, PlannedEncoderOutputs):
            model_kwargs.pop("mm_encoder_outputs")
        input_ids, model_kwargs = super()._expand_inputs_for_generation(
            expand_size=expand_size, is_encoder_decoder=is_encoder_decoder, input_ids=input_ids, **model_kwargs
        )
        if isinstance(planned, PlannedEncoderOutputs):
            model_kwargs["mm_encoder_outputs"] = planned.expand(expand_size)
        return input_ids, model_kwargs

    # -- Step 6: `GenerationMixin._supports_logits_to_keep` ------------------------------------------------------

    def _supports_logits_to_keep(self) -> bool:
        # Upstream reads the forward's named parameters; a forward that hands `logits_to_keep` to its language model
        # through its keyword arguments takes it too, so prefill computes the logits `generate` reads only.
        return super()._supports_logits_to_keep() or "logits_to_keep" in self.language_model_kwargs

    # -- Step 7: `GenerationMixin._prepare_static_cache` ----------------------------------------------------------

    def _prepare_static_cache(
        self, cache_implementation: str, batch_size: int, max_cache_len: int, prefill_chunk_size, model_kwargs
    ):
        # A family's upstream override may size the layers holding item states from the pixel inputs (Llama 3.2
        # Vision's cross-attention layers: `pixel_values.shape[1]` images a row), which step 4 took out of the kwargs:
        # it is shown a stand-in of that shape, the prompt's most items in a row.
        planned = model_kwargs.get("mm_encoder_outputs")
        key = self.vision_facts.modalities[0].pixel_keys[0] if self.vision_facts.modalities else None
        if self.item_state_layers() and isinstance(planned, PlannedEncoderOutputs) and model_kwargs.get(key) is None:
            per_row = Counter(span.row for span in planned.prepared.spans)
            if per_row:
                model_kwargs = {**model_kwargs, key: torch.empty(1, max(per_row.values()), 0)}
        return super()._prepare_static_cache(
            cache_implementation, batch_size, max_cache_len, prefill_chunk_size, model_kwargs=model_kwargs
        )

    # -- Every forward: `GenerationMixin.prepare_inputs_for_generation` -------------------------------------------

    def prepare_inputs_for_generation(self, input_ids: torch.LongTensor, *args, inputs_embeds=None, **kwargs):
        # Assisted decoding's first forward: the tokens after the cache only, drafts typed as generated tokens.
        # `inputs_embeds` is named: upstream's `generate` takes it only where this signature does.
        kwargs = first_assisted_forward_inputs(self, input_ids, kwargs)
        inputs = super().prepare_inputs_for_generation(input_ids, *args, inputs_embeds=inputs_embeds, **kwargs)
        cross_attention = self.vision_facts.cross_attention
        if cross_attention is not None and not cross_attention.every_forward and "mm_encoder_outputs" in inputs:
            # A cross-attention family's forward takes the states under its own name (upstream has dropped them
            # already where it drops `mm_encoder_outputs`: decoding steps with a cache); one whose every forward reads
            # them fills that name itself from the plan
            outputs = inputs.pop("mm_encoder_outputs")
            if outputs:
                inputs[cross_attention.states_key] = next(iter(outputs.values())).pooler_output
        return inputs

    # -- Step 9: `GenerationMixin._prefill` -----------------------------------------------------------------------

    def _prefill(
        self, input_ids: torch.LongTensor, generation_config, model_kwargs: dict, is_first_iteration: bool = True
    ):
        # Upstream cuts chunks every `prefill_chunk_size` tokens and slices features by counting every placeholder of
        # the prompt; here chunks are planned from the spans (never ending inside a bidirectional block) and each
        # runs through upstream's own unchunked prefill with exactly the feature rows of its placeholders.
        if self.config.is_encoder_decoder and generation_config.prefill_chunk_size and is_first_iteration:
            return prefill_decoder_in_chunks(self, super()._prefill, input_ids, generation_config, model_kwargs)
        planned = model_kwargs.get("mm_encoder_outputs")
        if not isinstance(planned, PlannedEncoderOutputs):
            return super()._prefill(input_ids, generation_config, model_kwargs, is_first_iteration=is_first_iteration)
        if not is_first_iteration:
            # An assistant's later drafting rounds feed only the tokens since its last round, in one forward: upstream's
            # chunks would hand them no prepared items, which a forward reading them every time (IDEFICS) needs
            return _run_unchunked(super()._prefill, input_ids, generation_config, model_kwargs, is_first_iteration)

        cache = model_kwargs.get("cache")
        start = cache_length(cache) if cache is not None else 0
        chunk_size = check_prefill_chunk_size(generation_config.prefill_chunk_size, cache)
        chunks = planned.plan_chunks(start, chunk_size, cache, model_kwargs.get("attention_mask"))
        check_no_block_after_cache_in_static_cache(cache, chunks, planned.prepared.intervals)
        if len(chunks) == 1:
            # One forward over the rest of the prompt: upstream's prefill as it is (run eagerly, as upstream does,
            # so a compiled decoding forward never sees prefill's shapes and arguments).
            return _run_unchunked(super()._prefill, input_ids, generation_config, model_kwargs, True)

        offset = planned.prepared.offset
        axes = _chunked_input_axes(self.vision_facts)
        whole = {key: model_kwargs[key] for key in axes if model_kwargs.get(key) is not None}
        try:
            for chunk_start, chunk_end in chunks:
                for key, value in whole.items():
                    # Up to the chunk end: masks read them over cache + chunk (upstream slices the rest itself)
                    model_kwargs[key] = value.narrow(axes[key], 0, min(chunk_end, value.shape[axes[key]]))
                rows = planned.outputs_between(chunk_start, chunk_end)
                model_kwargs["mm_encoder_outputs"] = rows if rows is not None else {}
                # Only the chunk's ids: upstream's prefill then feeds them all after the cache
                chunk_ids = input_ids[:, chunk_start - offset : chunk_end - offset]
                outputs = _run_unchunked(super()._prefill, chunk_ids, generation_config, model_kwargs, True)
                model_kwargs["cache"] = outputs.cache
                planned.after_prefill_forward(outputs.cache, chunk_end)  # keeps a hybrid decoder's states
        finally:
            model_kwargs.update(whole)
            model_kwargs["mm_encoder_outputs"] = planned
        return outputs
