"""`VisionPrepGenerationMixin`: the one place that overrides transformers' generation hooks.

`generate` calls the hooks below in this order (numbers follow `GenerationMixin.generate`'s own steps):

0. `generate` itself only splits off the opt-in `prefix_cache` and stores the finished rows afterwards.
1. `_validate_model_kwargs`: vlmprep's own generate kwargs (`cache_salt`) are not model inputs.
4. `_prepare_position_ids_for_generation`: families with multimodal rope never read `rope_deltas` left on the model.
4. `_maybe_prepare_encoder_kwargs_for_generation`: the images are prepared here, from the image spans that lie
   after the cache's length: inputs checked, the cache rolled back out of any bidirectional block it ends in, and
   features computed once for exactly the images prefill needs (encoder-cache hits first, then one batched call).
   They leave as upstream's own `mm_encoder_outputs` (a `PlannedEncoderOutputs`: the rows of every placeholder after
   the resume point, plus the plan), so every upstream path that runs the rest of the prompt in one forward is
   exact unchanged: assisted decoding, `use_cache=False`, an assistant model copying these kwargs.
5. `_expand_inputs_for_generation`: beams and `num_return_sequences` share those features, nothing is re-encoded.
9. `_prefill`: chunks are planned from the spans (never ending inside a bidirectional block); each runs through
   upstream's own unchunked prefill with exactly the feature rows of the placeholders in its slice.

Decoding is left to transformers. No request state is kept on the model: everything lives in `model_kwargs`
(Qwen-VL's `rope_deltas` are written for code that reads them after a call, never read).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import GenerationMixin

from ..cache.encoder_cache import EncoderCache
from ..cache.identity import cache_identity, check_cache_salt, salt_namespace
from ..cache.prefix_cache import PrefixCache
from ..utils.logging import get_logger
from .cache_rollback import roll_back_cache
from .encoding import ImageEncodingMixin, select_images
from .facts import VisionFacts
from .prefix import PrefixRequest
from .prepared import PlannedEncoderOutputs, PreparedImages
from .spans import (
    ImageSpan,
    blocks_from_prefix,
    blocks_from_runs,
    find_image_spans,
    merge_blocks,
    plan_prefill_chunks,
    resolve_resume_point,
    shift_spans,
)
from .validation import (
    check_cache_matches_model,
    check_no_block_after_cache_in_static_cache,
    check_pixel_dims,
    check_pixel_shapes,
    check_sequence_input,
)

# Keyword arguments of `generate` that belong to vlmprep and never reach the model.
VLMPREP_GENERATE_KWARGS = ("cache_salt", "vlmprep_prefix_request")
TOKEN_TYPE_KEYS = ("token_type_ids", "mm_token_type_ids", "moe_mm_token_type_ids")
# Inputs that run along the sequence, cut at each prefill chunk's end.
PER_TOKEN_KEYS = ("attention_mask", "position_ids", *TOKEN_TYPE_KEYS)
DEFAULT_ENCODER_CACHE_BYTES = 512 * 2**20
_UNSET = object()
logger = get_logger(__name__)


class VisionPrepGenerationMixin(ImageEncodingMixin):
    """Generation mixin for VLMs: the vision encoder runs once, in input preparation, for the images prefill needs.

    A drop-in class lists this mixin before the transformers class and states its `vision_facts`.

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
        # Upstream treats any class defined outside `transformers.` as custom modeling code and then skips the
        # checkpoint key conversions (e.g. LLaVA's legacy `language_model.lm_head` layout) and weight-init rules.
        # A drop-in runs transformers' own modeling code; only generation differs, so it loads exactly as upstream.
        return False

    # -- The encoder cache: per model, on by default -------------------------------------------------------------

    @property
    def encoder_cache(self) -> EncoderCache | None:
        """The `EncoderCache` of per-image features (one of 512 MiB by default); set `None` to turn it off."""
        cache = self.__dict__.get("_vlmprep_encoder_cache", _UNSET)
        if cache is _UNSET:
            cache = EncoderCache(max_bytes=DEFAULT_ENCODER_CACHE_BYTES)
            self.__dict__["_vlmprep_encoder_cache"] = cache
        return cache

    @encoder_cache.setter
    def encoder_cache(self, cache: EncoderCache | None) -> None:
        if cache is not None and not isinstance(cache, EncoderCache):
            raise TypeError(f"`encoder_cache` must be a vlmprep.EncoderCache or None, got {type(cache).__name__}.")
        self.__dict__["_vlmprep_encoder_cache"] = cache

    def _encoder_cache_identity(self, part: str = "vision") -> tuple[str, ...]:
        # Entries made under other weights (of this model or another), another autocast state or another train/eval
        # mode must never be served: features depend on the vision part only, KV on the whole model.
        return cache_identity(self, part=part)

    @property
    def prefix_cache(self) -> PrefixCache | None:
        """The `PrefixCache` every `generate` call uses unless it passes `prefix_cache=` (`None`: off, the default)."""
        return self.__dict__.get("_vlmprep_prefix_cache")

    @prefix_cache.setter
    def prefix_cache(self, store: PrefixCache | None) -> None:
        if store is not None and not isinstance(store, PrefixCache):
            raise TypeError(f"`prefix_cache` must be a vlmprep.PrefixCache or None, got {type(store).__name__}.")
        self.__dict__["_vlmprep_prefix_cache"] = store

    def generate(self, *args, prefix_cache: PrefixCache | None = None, **kwargs):
        """`transformers.GenerationMixin.generate`, plus vlmprep's opt-in `prefix_cache`.

        Args:
            prefix_cache (`PrefixCache`, *optional*):
                resume from the longest stored prefix of the prompt, and store the prompt and answer afterwards;
                defaults to `model.prefix_cache`. Not used when a `cache` is passed, with beams, with
                `num_return_sequences > 1`, in train mode (dropout changes the KV) or with a quantized cache; it
                composes with every other `cache_implementation` (see `vlmprep.generation.prefix`).
            cache_salt (`str`, *optional*):
                isolates encoder- and prefix-cache entries: entries made under one salt are invisible under another.
            args, kwargs: everything transformers' `generate` takes.

        Returns:
            What transformers' `generate` returns.
        """
        if prefix_cache is not None and not isinstance(prefix_cache, PrefixCache):
            raise TypeError(
                f"`prefix_cache` must be a vlmprep.PrefixCache or None, got {prefix_cache!r}. Pass a store, e.g. "
                "`prefix_cache=PrefixCache()`, and keep it across calls to reuse prefixes."
            )
        store = prefix_cache if prefix_cache is not None else self.prefix_cache
        if store is None or self.training:
            if store is not None:
                logger.warning_once(
                    "The prefix cache is not used with the model in train mode (dropout changes the KV); this call "
                    "prefills the whole prompt."
                )
            return super().generate(*args, **kwargs)
        request = PrefixRequest(store)
        output = super().generate(*args, vlmprep_prefix_request=request, **kwargs)
        request.finish(output if isinstance(output, torch.Tensor) else output.sequences)
        return output

    # -- Family facts that are computed rather than stated --------------------------------------------------------

    # Families with one modality override these with the `(model_kwargs, ...)` signature; families with several
    # (`VisionFacts.other_modalities`) accept `modality`, which the mixin passes only for the modalities after images.

    def image_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | list | None:
        """Placeholder tokens of each image (one count for all, a list per image, or `None`: one image per run).

        An item whose placeholders come in several runs (a video with one run per frame) has a list of its pieces.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (some families read image sizes from them).
            modality (`str`, *optional*, defaults to `"image"`): whose items to count tokens of.

        Returns:
            `int`, `list[int | list[int]]` or `None`
        """
        return self.vision_facts.fixed_tokens_per_image(self.config) if modality == "image" else None

    def count_images(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """How many images (items of `modality`) the call's pixel inputs hold (`None` when there are none).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): whose items to count.

        Returns:
            `int` or `None`
        """
        pixel_keys = self._modality_facts(modality).pixel_keys
        pixel_values = next((model_kwargs[k] for k in pixel_keys if model_kwargs.get(k) is not None), None)
        if pixel_values is None:
            return None
        return len(pixel_values) if isinstance(pixel_values, (list, tuple)) else pixel_values.shape[0]

    def select_image_inputs(
        self, model_kwargs: dict[str, Any], indices: list[int], modality: str = "image"
    ) -> dict[str, Any]:
        """The per-image inputs (pixels and per-image extras) of the given images, in that order.

        Families whose pixel inputs are not one entry per image (e.g. flattened patches) override this.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            indices (`list[int]`): image indices (indices among the items of `modality`).
            modality (`str`, *optional*, defaults to `"image"`): whose items.

        Returns:
            `dict[str, Any]`: keyword arguments for the family's `get_image_features` (`get_<modality>_features`).
        """
        facts = self._modality_facts(modality)
        keys = (*facts.pixel_keys, *facts.per_item_keys)
        return {key: select_images(model_kwargs[key], indices) for key in keys if model_kwargs.get(key) is not None}

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise a clear `ValueError` when pixel inputs do not fit the vision tower, before anything is encoded.

        The default checks the image pixels by `VisionFacts.pixel_layout` (transformers would fail with a raw shape
        error deep in the tower); families with other layouts (flattened patches) override this or check their
        inputs in `count_images`.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): whose pixel inputs to check.
        """
        facts = self.vision_facts
        key = self._modality_facts(modality).pixel_keys[0]
        pixel_values = model_kwargs.get(key)
        if modality != "image" or not isinstance(pixel_values, torch.Tensor):
            return
        vision_config = getattr(self.config, "vision_config", None)
        if facts.pixel_layout == "images" and facts.fixed_resolution:
            check_pixel_shapes(pixel_values, vision_config)
        elif facts.pixel_layout == "crops":
            check_pixel_dims(pixel_values, vision_config, ("num_images", "crops"), key)
        elif facts.pixel_layout == "up_to_size":
            check_pixel_dims(pixel_values, vision_config, ("num_images",), key, up_to_size=True)

    def vision_position_ids(self, input_ids: torch.Tensor, model_kwargs: dict[str, Any]) -> torch.Tensor | None:
        """Position ids of the whole prompt for families with multimodal rope, from the prompt alone.

        The default `None` keeps transformers' 1D positions. A family returning a tensor gets it sliced per prefill
        chunk (last dimension) and extended by one per decoded token.

        Args:
            input_ids (`torch.Tensor`): the whole prompt.
            model_kwargs (`dict[str, Any]`): the call's inputs (pixel inputs still present).

        Returns:
            `torch.Tensor` or `None`
        """
        return None

    # -- Step 1: `GenerationMixin._validate_model_kwargs` ---------------------------------------------------------

    def _validate_model_kwargs(self, model_kwargs: dict[str, Any]):
        # Replaces the upstream check only to let vlmprep's own kwargs through; they are popped in step 4.
        own = {key: model_kwargs.pop(key) for key in VLMPREP_GENERATE_KWARGS if key in model_kwargs}
        try:
            return super()._validate_model_kwargs(model_kwargs)
        finally:
            model_kwargs.update(own)

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
        # Upstream encodes every image passed, whatever the cache already holds; here only the images whose spans
        # end after the resume point are encoded, and the cache is checked and rolled back first.
        salt = check_cache_salt(model_kwargs.pop("cache_salt", None))
        request = model_kwargs.pop("vlmprep_prefix_request", None)
        if model_input_name != "input_ids" or self.config.is_encoder_decoder:
            return super()._maybe_prepare_encoder_kwargs_for_generation(
                inputs_tensor, model_kwargs, model_input_name, generation_config
            )
        supplied = model_kwargs.pop("mm_encoder_outputs", None)
        if isinstance(supplied, PlannedEncoderOutputs):
            # A main model's kwargs, handed to this model as its assistant: its per-item extras (grids) are back
            for key, value in supplied.item_extras.items():
                model_kwargs.setdefault(key, value)
        prepared = self._prepare_images(inputs_tensor, model_kwargs, generation_config, salt, request, supplied)
        item_extras = {}
        for modality in self.vision_facts.modalities:
            for key in (*modality.pixel_keys, *modality.per_item_keys, *self._encoder_kwarg_names(modality.name)):
                value = model_kwargs.pop(key, None)
                if value is not None and key not in modality.pixel_keys:
                    item_extras[key] = value
        # The features travel as upstream's own `mm_encoder_outputs` (rows of every placeholder after the resume
        # point), so every upstream path that runs the rest of the prompt in one forward is exact as it is:
        # assisted decoding's first forward, `use_cache=False`, an assistant model that copies these kwargs.
        end = prepared.offset + inputs_tensor.shape[1]
        model_kwargs["mm_encoder_outputs"] = PlannedEncoderOutputs(prepared, end, item_extras)
        return model_kwargs

    def _prepare_images(
        self,
        input_ids: torch.Tensor,
        model_kwargs: dict[str, Any],
        generation_config,
        salt: str | None,
        request: PrefixRequest | None = None,
        supplied: dict | None = None,
    ) -> PreparedImages:
        facts = self.vision_facts
        batch_size, prompt_length = input_ids.shape

        # 4.1 The cache: what it holds, and that it can belong to this model and this prompt.
        cache = model_kwargs.get("cache")
        past_length = cache.get_seq_length() if cache is not None else 0
        if cache is not None:
            check_cache_matches_model(cache, self.config, batch_size)
        attention_mask = model_kwargs.get("attention_mask")
        full_length = attention_mask.shape[-1] if attention_mask is not None else None
        full_length = full_length or getattr(generation_config, "_mask_length", None) or prompt_length
        # A caller may pass only the new tokens with a mask covering cache + new tokens (a transformers idiom).
        offset = past_length if past_length and full_length == past_length + prompt_length else 0
        if attention_mask is None and full_length not in (prompt_length, offset + prompt_length):
            # generate() drops an all-ones mask before this hook and keeps only its length
            attention_mask = torch.ones(batch_size, full_length, dtype=torch.long)
        check_sequence_input("attention_mask", attention_mask, batch_size, {prompt_length, offset + prompt_length})
        attention_mask = model_kwargs.get("attention_mask")
        if prompt_length == 0:
            raise ValueError("`input_ids` is empty: pass at least one prompt token (e.g. the BOS token).")
        if offset == 0 and past_length >= prompt_length:
            raise ValueError(
                f"The cache already holds {past_length} tokens but the prompt has {prompt_length}: at least the last "
                "prompt token must be computed to get logits. Pass the cache of a shorter prefix of this prompt "
                "(e.g. `cache.crop(...)`), or no cache."
            )

        # 4.2 Token types: derived from the placeholders when the family needs them and the caller left them out.
        token_types = model_kwargs.get(facts.token_type_key)
        if token_types is not None and token_types.ndim == 2 and token_types.shape[-1] < prompt_length:
            # `input_ids` grew past the types (generated tokens appended to ids and mask only, as transformers'
            # own continuation idiom does): the tokens past them are what generation appends, text or suffix.
            fill = 1 if facts.bidirectional == "prefix" else 0
            token_types = torch.nn.functional.pad(token_types, (0, prompt_length - token_types.shape[-1]), value=fill)
            model_kwargs[facts.token_type_key] = token_types
        check_sequence_input(facts.token_type_key, token_types, batch_size, {prompt_length, offset + prompt_length})
        if facts.bidirectional is not None:
            if token_types is None:
                token_types = self._derive_token_types(input_ids, past_length - offset if past_length else None)
            if token_types.shape[-1] < offset + prompt_length:
                token_types = torch.nn.functional.pad(token_types, (offset, 0))  # cached part: text
            model_kwargs[facts.token_type_key] = token_types

        # 4.3 Spans, and which images (and items of other modalities) the prompt refers to.
        spans = shift_spans(self._find_spans(input_ids, model_kwargs), offset)
        given = self._supplied_features(supplied, spans)
        self._check_images_match_spans(spans, model_kwargs, past_length, set(given[0]))
        if given[0]:
            request = None  # features without pixels have no content hash to key a stored prefix by
        position_ids = self.vision_position_ids(input_ids, model_kwargs)
        if position_ids is not None:
            if position_ids.shape[-1] != offset + prompt_length:
                raise ValueError(
                    "This model's multimodal positions are computed from the whole prompt, but only the "
                    f"{prompt_length} tokens after the {offset} cached ones were passed. Pass the whole conversation "
                    "as `input_ids` (with its pixel inputs and token types) together with the cache."
                )
            model_kwargs["position_ids"] = position_ids

        if facts.positions_from_cache_length:
            # The decoder ignores them (its positions count padding): keys must not take them for the real ones
            model_kwargs.pop("position_ids", None)

        # 4.4 A prefix-cache hit becomes the cache, when the caller passed none.
        blocks = self._bidirectional_blocks(token_types, attention_mask)
        intervals = merge_blocks(blocks)
        image_hashes: dict[int, str] = {}
        trusted = False
        if request is not None and cache is not None:
            logger.warning_once(
                "The prefix cache is not used when a `cache` is passed: the call resumes from that cache as it is."
            )
        if request is not None and cache is None and request.applies(self, generation_config, batch_size):
            image_hashes = self._image_hashes(sorted({s.image_index for s in spans}), spans, model_kwargs, salt)
            namespace = (*self._encoder_cache_identity(part="model"), salt_namespace(salt))
            # Keys cover the ids, token types and positions (set in 4.2 and 4.3) of every token, and the images
            cache, past_length, trusted = request.restore(
                self, input_ids, model_kwargs, spans, image_hashes, blocks, intervals, namespace, generation_config
            )
            model_kwargs["cache"] = cache

        # 4.5 Resume point: never strictly inside a bidirectional block, unless the prefix cache's KV saw it whole.
        resume_point = past_length if trusted else resolve_resume_point(past_length, intervals)
        if resume_point < offset:
            raise ValueError(
                f"The cache ends at position {past_length}, inside a bidirectional block that starts at "
                f"{resume_point}, and only the tokens after the cache were passed, so the block cannot be recomputed "
                "whole. Pass the whole prompt as `input_ids` (with its attention mask)."
            )
        if resume_point < past_length:
            resume_point = roll_back_cache(cache, past_length, resume_point)

        # 4.6 Features of the images that prefill needs; images wholly inside the cache are not even hashed.
        needed = sorted({span.image_index for span in spans if span.end > resume_point})
        features, deepstack = (
            self._image_features(needed, spans, model_kwargs, salt, image_hashes, given) if needed else ({}, {})
        )
        return PreparedImages(
            spans=spans,
            features=features,
            intervals=intervals,
            resume_point=resume_point,
            offset=offset,
            as_list=facts.features_as_list_by_modality(),
            deepstack=deepstack,
        )

    def _derive_token_types(self, input_ids: torch.Tensor, cached: int | None) -> torch.Tensor:
        # What the family's processor would have returned: 1 on image placeholders (Gemma3), or an all-0 prefix
        # covering the whole prompt (PaliGemma without a suffix). Continuing from a cache (`cached` of these ids are
        # in it), PaliGemma's new tokens are the generated suffix, as upstream treats them: causal, type 1.
        if self.vision_facts.bidirectional == "image":
            return (input_ids == self.vision_facts.placeholder_id(self.config)).long()
        token_types = torch.zeros_like(input_ids)
        if cached is not None:
            token_types[:, max(cached, 0) :] = 1
        return token_types

    def _bidirectional_blocks(self, token_types: torch.Tensor | None, attention_mask: torch.Tensor | None) -> list:
        if self.vision_facts.bidirectional is None or token_types is None:
            return []
        if self.vision_facts.bidirectional == "image":
            return blocks_from_runs(token_types == 1)
        prefix = token_types == 0
        if attention_mask is not None and attention_mask.shape == prefix.shape:
            prefix = prefix & attention_mask.bool()  # padding is masked out, it belongs to no block
        return blocks_from_prefix(prefix)

    def _find_spans(self, input_ids: torch.Tensor, model_kwargs: dict[str, Any]) -> list[ImageSpan]:
        # Items of every modality are numbered together, images first, so features and hashes key on one index.
        token_type_key = self.vision_facts.token_type_key
        token_types = model_kwargs.get(token_type_key)
        spans: list[ImageSpan] = []
        for modality in self.vision_facts.modalities:
            counts = self._modality_hook(self.image_token_counts, modality.name, model_kwargs)
            first_index = len({span.image_index for span in spans})
            ids = input_ids
            if modality.token_type is not None and token_types is not None:
                # The placeholder id is shared with another modality: only the positions of this one's type count
                ids = input_ids.masked_fill(token_types[..., -input_ids.shape[-1] :] != modality.token_type, -1)
            elif modality.token_type is not None and modality.name != "image":
                if self._modality_hook(self.count_images, modality.name, model_kwargs) is not None:
                    raise ValueError(
                        f"This model's {modality.name}s share the image placeholder token, so only "
                        f"`{token_type_key}` tells their placeholders apart. Pass `{token_type_key}` as the "
                        "processor returns it."
                    )
                continue  # without token types, shared placeholders are images (what the processor marks)
            placeholder_id = modality.placeholder_id(self.config)
            spans += find_image_spans(ids, placeholder_id, counts, modality.name, first_index)
        return sorted(spans, key=lambda span: (span.row, span.start))

    def _check_images_match_spans(
        self, spans: list[ImageSpan], model_kwargs: dict[str, Any], past_length: int, given: set[int] = frozenset()
    ) -> None:
        for modality in self.vision_facts.modalities:
            name = modality.name
            modality_spans = [span for span in spans if span.modality == name]
            num_items = self._modality_hook(self.count_images, name, model_kwargs)
            has_pixels = any(model_kwargs.get(key) is not None for key in modality.pixel_keys)
            if has_pixels and any(span.image_index in given for span in modality_spans):
                raise ValueError(
                    f"Both `{modality.pixel_keys[0]}` and `mm_encoder_outputs['{name}']` were passed. Pass one of "
                    "them: the pixel inputs (vlmprep encodes them once) or the precomputed encoder outputs."
                )
            if num_items is None:
                uncached = [s for s in modality_spans if s.end > past_length and s.image_index not in given]
                if uncached:
                    raise ValueError(
                        f"The prompt has {len(uncached)} {name} placeholder run(s) after the {past_length} cached "
                        f"tokens (first at row {uncached[0].row}, position {uncached[0].start}) but no pixel inputs "
                        f"were passed (transformers would run them as text). Pass `{modality.pixel_keys[0]}` for "
                        f"every {name} of the prompt."
                    )
                continue
            num_runs = len({span.image_index for span in modality_spans})
            if num_items != num_runs:
                raise ValueError(
                    f"{num_items} {name}(s) were passed but the prompt has {num_runs} {name} placeholder run(s). "
                    f"Pass exactly one {name} per placeholder run, in prompt order (all {name}s of the conversation, "
                    "also those already in the cache), or fix the prompt."
                )
            self._modality_hook(self.check_pixel_inputs, name, model_kwargs)

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

    # -- Step 9: `GenerationMixin._prefill` -----------------------------------------------------------------------

    def _prefill(
        self, input_ids: torch.LongTensor, generation_config, model_kwargs: dict, is_first_iteration: bool = True
    ):
        # Upstream cuts chunks every `prefill_chunk_size` tokens and slices features by counting every placeholder of
        # the prompt; here chunks are planned from the spans (never ending inside a bidirectional block) and each
        # runs through upstream's own unchunked prefill with exactly the feature rows of its placeholders.
        planned = model_kwargs.get("mm_encoder_outputs")
        if not isinstance(planned, PlannedEncoderOutputs) or not is_first_iteration:
            return super()._prefill(input_ids, generation_config, model_kwargs, is_first_iteration=is_first_iteration)

        cache = model_kwargs.get("cache")
        start = cache.get_seq_length() if cache is not None else 0
        chunk_size = generation_config.prefill_chunk_size
        if chunk_size is not None and (
            isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
        ):
            raise TypeError(f"`prefill_chunk_size` must be a positive int or None, got {chunk_size!r}.")
        if chunk_size is not None and cache is None:
            raise ValueError("Chunked prefill needs a cache: pass `use_cache=True` or `prefill_chunk_size=None`.")
        chunks = plan_prefill_chunks(start, planned.end, chunk_size, planned.prepared.intervals)
        check_no_block_after_cache_in_static_cache(cache, chunks, planned.prepared.intervals)
        if len(chunks) == 1:
            # One forward over the rest of the prompt: upstream's prefill as it is (run eagerly, as upstream does,
            # so a compiled decoding forward never sees prefill's shapes and arguments).
            generation_config.prefill_chunk_size = None
            try:
                return super()._prefill(input_ids, generation_config, model_kwargs, is_first_iteration=True)
            finally:
                generation_config.prefill_chunk_size = chunk_size

        offset = planned.prepared.offset
        whole = {key: model_kwargs[key] for key in PER_TOKEN_KEYS if model_kwargs.get(key) is not None}
        generation_config.prefill_chunk_size = None
        try:
            for chunk_start, chunk_end in chunks:
                for key, value in whole.items():
                    # Up to the chunk end: masks read them over cache + chunk (upstream slices the rest itself)
                    model_kwargs[key] = value[..., :chunk_end]
                rows = planned.prepared.encoder_outputs_between(chunk_start, chunk_end)
                model_kwargs["mm_encoder_outputs"] = rows if rows is not None else {}
                # Only the chunk's ids: upstream's prefill then feeds them all after the cache
                chunk_ids = input_ids[:, chunk_start - offset : chunk_end - offset]
                outputs = super()._prefill(chunk_ids, generation_config, model_kwargs, is_first_iteration=True)
                model_kwargs["cache"] = outputs.cache
        finally:
            generation_config.prefill_chunk_size = chunk_size
            model_kwargs.update(whole)
            model_kwargs["mm_encoder_outputs"] = planned
        return outputs
