"""IDEFICS (Flamingo-style): images reach the decoder through gated cross-attention, not through placeholder rows.

The processor writes each image as one `<image>` token (between `<fake_token_around_image>` tokens), pads
`pixel_values` to `(batch_size, max_images, C, H, W)` with all-zero images, and says which image each token sees in
`image_attention_mask` `(batch_size, seq_len, max_images)` (the latest image before it). Each real image is one item
of the sub-image layout; its features are the perceiver resampler's latents (the vision tower's states without a
resampler), kept as one row `(1, latents * dim)` at its `<image>` token so that the spans count one row per
placeholder. Upstream runs the tower in the first forward and the resampler again at every decoding step; here both
run once per distinct image, in input preparation, and every forward (each prefill chunk, each decoding step) gets the
states as upstream's own `perceiver_embeddings` (`image_encoder_embeddings` without a resampler). Upstream's gated
cross-attention layers project those states to keys and values again in every forward (their attention takes no
cache); here each layer's key and value projections of the call's states run once per call: the same states tensor
is handed to every forward, and the projections (`ImageStateProjection`, `nn.Linear` with the same parameters) answer
a repeated input from the call's memo, the same values upstream recomputes.

The `<image>` id is a tokenizer fact that IDEFICS configs do not hold: the drop-in reads `config.image_token_id`, set on
the config before loading (`config_refusal` says how); without it `vlmprep.AutoModelForImageTextToText` loads
transformers' class, with a warning.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import replace
from typing import Any

import torch
import transformers
from transformers.modeling_outputs import BaseModelOutputWithPooling

from ..generation.facts import CrossAttention
from ..generation.prepared import PlannedEncoderOutputs, PreparedItems
from ..generation.validation import check_companion_input
from .base import VisionPrepMixin, keeps_upstream_interface
from .layouts.sub_images import SubImagesLayout

# The running call's projections of its image states (`ImageStateProjection`): set around each forward of a call that
# prepared its images, so concurrent calls (threads) each see their own.
_CALL_PROJECTIONS: ContextVar[dict | None] = ContextVar("idefics_call_projections", default=None)


class ImageStateProjection(torch.nn.Linear):
    """A gated cross-attention layer's key or value projection, answering a repeated input from the call's memo.

    Within one `generate` call every forward hands the layers the same prepared image states (a view of one tensor):
    the projection of that input is computed at the first forward and reused at the others. Outside such a call, or
    with gradients on, it is `nn.Linear` itself. The parameters are the Linear's own (same names, same checkpoints).
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        memo = _CALL_PROJECTIONS.get()
        if memo is None or torch.is_grad_enabled():
            return super().forward(input)
        # The storage and layout say the input is the call's states tensor (made by the drop-in, never written in
        # place); the memo holds the input, so its storage cannot be reused by another tensor during the call
        key = (id(self), input.data_ptr(), tuple(input.shape), input.stride())
        if key not in memo:
            memo[key] = (input, super().forward(input))
        return memo[key][1]


class IdeficsForVisionText2Text(SubImagesLayout, VisionPrepMixin, transformers.IdeficsForVisionText2Text):
    """Drop-in `transformers.IdeficsForVisionText2Text` whose vision tower and perceiver resampler run once per distinct
    image, in input preparation, and never at decoding steps.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.idefics import IdeficsForVisionText2Text
    >>> from vlmprep.testing.configs import tiny_idefics_config
    >>> model = IdeficsForVisionText2Text(tiny_idefics_config()).eval()
    >>> pixel_values = torch.zeros(1, 3, 3, 16, 16)
    >>> pixel_values[0, :2] = 1.0  # two images, one all-zero padding slot
    >>> model.count_items({"pixel_values": pixel_values})
    2

    ```
    """

    # One `<image>` token per image; the features are read by gated cross-attention in every later forward, which
    # `forward` hands upstream as `perceiver_embeddings` (`image_encoder_embeddings` without a resampler).
    vision_facts = replace(
        SubImagesLayout.vision_facts,
        per_image_keys=(),
        tokens_per_image=lambda config: 1,
        cross_attention=CrossAttention("perceiver_embeddings", mask=("image_attention_mask", 1), every_forward=True),
    )

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        for layer in self.model.gated_cross_attn_layers:
            for projection in (layer.cross_attn.k_proj, layer.cross_attn.v_proj):
                projection.__class__ = ImageStateProjection  # same module, same parameters: forward memoized per call

    @classmethod
    def config_refusal(cls, config) -> str | None:
        if getattr(config, "image_token_id", None) is None:
            return (
                "the config has no `image_token_id` (IDEFICS configs do not store the `<image>` token's id). Set it: "
                "`config = transformers.AutoConfig.from_pretrained(path)`, `config.image_token_id = "
                "processor.tokenizer.convert_tokens_to_ids('<image>')`, then `from_pretrained(path, config=config)`."
            )
        return None

    def continuous_batching_refusal(self) -> str:
        """Why transformers' continuous-batching engine does not run IDEFICS (`vlmprep.batching.support`).

        Returns:
            `str`
        """
        return (
            "IDEFICS reads its images through gated cross-attention layers with a per-token `image_attention_mask`; "
            "the paged engine builds its own inputs from token ids and has no place for image states or that mask."
        )

    def encode_image_items(
        self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False, **kwargs
    ) -> BaseModelOutputWithPooling:
        """The images' resampled states, each flattened to the one row its `<image>` token holds.

        Not `get_image_features`: transformers' class has none, and a drop-in adding it would answer `hasattr` unlike
        transformers (`vlmprep.generation.encoding.encoder_name`).

        Args:
            pixel_values (`torch.Tensor` of shape `(batch_size, num_images, C, H, W)`): real images only.
            interpolate_pos_encoding (`bool`, *optional*, defaults to `False`): upstream's flag, read from the call's
                inputs and hashed with each image: the tower interpolates its position embeddings to other sizes.

        Returns:
            `BaseModelOutputWithPooling`: `last_hidden_state` `(num_images, latents, dim)` and `pooler_output`
            `(num_images, 1, latents * dim)`.
        """
        pixel_values = pixel_values.flatten(0, 1).to(dtype=self.dtype)  # (num_images, C, H, W)
        states = self.model.vision_model(  # (num_images, patches, dim)
            pixel_values=pixel_values, interpolate_pos_encoding=bool(interpolate_pos_encoding)
        ).last_hidden_state
        if self.config.use_resampler:
            states = self.model.perceiver_resampler(states)  # (num_images, latents, dim)
        return BaseModelOutputWithPooling(last_hidden_state=states, pooler_output=states.flatten(1).unsqueeze(1))

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """The sub-image layout's check, relaxed to any image size with `interpolate_pos_encoding=True` (upstream's
        tower interpolates its position embeddings then).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): images only.
        """
        pixel_values = model_kwargs.get("pixel_values")
        if not model_kwargs.get("interpolate_pos_encoding") or not isinstance(pixel_values, torch.Tensor):
            super().check_pixel_inputs(model_kwargs, modality)
            return
        channels = self.config.vision_config.num_channels
        if pixel_values.ndim != 5 or pixel_values.shape[2] != channels:
            raise ValueError(
                f"`pixel_values` has shape {tuple(pixel_values.shape)} but this model's vision tower takes "
                f"(batch_size, sub_images, {channels}, height, width)."
            )

    def check_item_count(self, model_kwargs: dict[str, Any], spans: list, modality: str = "image") -> None:
        super().check_item_count(model_kwargs, spans, modality=modality)
        mask = model_kwargs.get("image_attention_mask")
        pixel_values = model_kwargs.get("pixel_values")
        if pixel_values is None:
            return
        if mask is None:
            raise ValueError(
                "`image_attention_mask` `(batch_size, seq_len, num_images)` is needed with IDEFICS images: it says "
                "which image each token sees. Pass the processor's output as it is."
            )
        if mask.ndim != 3:
            raise ValueError(
                f"`image_attention_mask` must be `(batch_size, seq_len, num_images)`, got shape {tuple(mask.shape)}."
            )
        check_companion_input(
            mask[:, 0, :], "image_attention_mask", pixel_values.shape[:2], "pixel_values", "one column per image slot"
        )
        per_row = torch.zeros(pixel_values.shape[0], dtype=torch.long)
        for span in spans:
            per_row[span.row] += 1
        real = pixel_values.flatten(2).ne(0).any(dim=-1).sum(dim=1)  # real images of each row
        if not torch.equal(per_row, real):
            raise ValueError(
                f"The rows of the prompt hold {per_row.tolist()} `<image>` tokens but `pixel_values` hold "
                f"{real.tolist()} real images per row. Pass each row's images in its own row of `pixel_values`, in "
                "prompt order (all images of the conversation, also those already in the cache)."
            )

    @keeps_upstream_interface(transformers.IdeficsForVisionText2Text.forward)
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache=None,
        inputs_embeds: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        image_encoder_embeddings: torch.Tensor | None = None,
        perceiver_embeddings: torch.Tensor | None = None,
        image_attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        interpolate_pos_encoding: bool | None = False,
        logits_to_keep: int | torch.Tensor = 0,
        *,
        mm_encoder_outputs: dict | None = None,
        **kwargs,
    ):
        """`transformers.IdeficsForVisionText2Text.forward`, also taking the images prepared by `generate`.

        Args:
            mm_encoder_outputs (`PlannedEncoderOutputs`, *optional*):
                the call's prepared images: handed to upstream's forward as `perceiver_embeddings` (or
                `image_encoder_embeddings` without a resampler), padded to `image_attention_mask`'s image slots.
            input_ids, attention_mask, ...: as upstream.

        Returns:
            What upstream's forward returns.
        """
        planned = isinstance(mm_encoder_outputs, PlannedEncoderOutputs)
        # A cache under upstream's deprecated name (`past_key_values`) must reach upstream's forward alone: its
        # decorator renames it (with its warning), and ignores it when `cache` is passed too, even as `None`.
        if cache is not None:
            kwargs["cache"] = cache
        caller_cache = kwargs.get("cache", kwargs.get("past_key_values"))
        # A text-only call still reads image states (the processor's all-zero image, which every token's mask
        # leaves out): with prepared items, or with none but a mask, the prepared (or zero) states stand for them
        if planned and (mm_encoder_outputs.prepared.features or image_attention_mask is not None):
            if image_encoder_embeddings is not None or perceiver_embeddings is not None:
                raise ValueError(
                    "Pass the images either as `pixel_values` or as `image_encoder_embeddings`/`perceiver_embeddings` "
                    "(`image_hidden_states` to `generate`), not both."
                )
            tokens = input_ids if input_ids is not None else inputs_embeds
            if image_attention_mask is None or image_attention_mask.shape[:2] != tokens.shape[:2]:
                raise ValueError(
                    "`image_attention_mask` must have one row per token fed, `(batch_size, seq_len, num_images)`; "
                    "pass the processor's mask for the whole prompt."
                )
            past = caller_cache.get_seq_length() if caller_cache is not None else 0
            states = self._image_states(mm_encoder_outputs, image_attention_mask, past)
            name = "perceiver_embeddings" if self.config.use_resampler else "image_encoder_embeddings"
            kwargs[name] = states
            memo = mm_encoder_outputs.per_call.setdefault("projections", {})
        else:
            kwargs.update(
                pixel_values=pixel_values,
                image_encoder_embeddings=image_encoder_embeddings,
                perceiver_embeddings=perceiver_embeddings,
            )
            memo = None  # states of the caller's, or computed by upstream's forward: projected there
        projections = _CALL_PROJECTIONS.set(memo)
        try:
            return super().forward(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                inputs_embeds=inputs_embeds,
                image_attention_mask=image_attention_mask,
                labels=labels,
                use_cache=use_cache,
                interpolate_pos_encoding=interpolate_pos_encoding,
                logits_to_keep=logits_to_keep,
                **kwargs,
            )
        finally:
            _CALL_PROJECTIONS.reset(projections)

    def _image_states(
        self, planned: PlannedEncoderOutputs, image_attention_mask: torch.Tensor, past: int
    ) -> torch.Tensor:
        # One states tensor per call and batch shape: every forward hands the same one, so the gated layers' key and
        # value projections of it run once (`ImageStateProjection`); the mask is checked at every forward.
        batch_size, fed, slots = image_attention_mask.shape
        key = ("states", id(self), batch_size, slots)
        if key not in planned.per_call:
            planned.per_call[key] = self._slot_states(planned.prepared, batch_size, slots)
        states, slot_start = planned.per_call[key]
        self._check_image_attention_mask(image_attention_mask, slot_start, past)
        return states

    def _slot_states(self, prepared: PreparedItems, batch_size: int, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
        # Row b's j-th `<image>` token is its image slot j, as the processor numbers them; slots of padding images
        # stay zero: upstream masks them out of every token's cross-attention, whatever their states.
        vision = self.config.vision_config
        latents = (
            self.config.perceiver_config.resampler_n_latents
            if self.config.use_resampler
            else (vision.image_size // vision.patch_size) ** 2 + 1  # the tower's patches and its class token
        )
        if prepared.features:  # without a resampler, images interpolated to another size have other patch counts
            latents = next(iter(prepared.features.values())).numel() // vision.embed_dim
        states = torch.zeros(batch_size, slots, latents, vision.embed_dim, dtype=self.dtype, device=self.device)
        slot_start = torch.full((batch_size, slots), torch.iinfo(torch.long).max, dtype=torch.long)
        taken = [0] * batch_size
        for span in sorted(prepared.spans, key=lambda span: (span.row, span.start)):
            slot = taken[span.row]
            if slot >= slots:
                raise ValueError(
                    f"Row {span.row} of the prompt has more `<image>` tokens than `image_attention_mask` has image "
                    f"columns ({slots}); pass the processor's mask."
                )
            states[span.row, slot] = prepared.features[span.item_index].view(latents, vision.embed_dim)
            slot_start[span.row, slot] = span.start
            taken[span.row] += 1
        return states.flatten(0, 1), slot_start  # (batch_size * slots, latents, dim), (batch_size, slots)

    @staticmethod
    def _check_image_attention_mask(mask: torch.Tensor, slot_start: torch.Tensor, past: int):
        fed = mask.shape[1]
        # A token may only see images whose `<image>` token comes before it: its KV then depends on its prefix alone,
        # which the prefix cache and chunked prefill rely on.
        positions = torch.arange(past, past + fed).view(1, fed, 1)  # (1, fed, 1)
        sees_later = mask.bool().cpu() & (positions < slot_start[:, None, :])
        if bool(sees_later.any()):
            raise ValueError(
                "`image_attention_mask` lets a token see an image whose `<image>` token comes later (or no image "
                "token at all). Each token may see only images before it, as the processor's mask does."
            )

    # Upstream's signature: `generate` takes `inputs_embeds` only from a class whose method names them
    @keeps_upstream_interface(transformers.IdeficsForVisionText2Text.prepare_inputs_for_generation)
    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        *args,
        image_attention_mask: torch.Tensor | None = None,
        mm_encoder_outputs: dict | None = None,
        image_hidden_states: torch.Tensor | None = None,
        **kwargs,
    ):
        # Upstream hands the first forward's image states back as `image_encoder_embeddings` at every step (resampled
        # again) and slices the mask from the end; here every forward gets the prepared states and the mask rows of
        # the positions it feeds (a prefill chunk starts at the cache's length, not at the prompt's end).
        model_inputs = super().prepare_inputs_for_generation(
            input_ids, *args, mm_encoder_outputs=mm_encoder_outputs, **kwargs
        )
        if isinstance(mm_encoder_outputs, PlannedEncoderOutputs):
            model_inputs.pop("pixel_values", None)
            model_inputs["mm_encoder_outputs"] = mm_encoder_outputs
        if image_hidden_states is not None:  # the tower's states given by the caller, as upstream takes them
            model_inputs["image_encoder_embeddings"] = image_hidden_states
        if image_attention_mask is not None:
            offset = mm_encoder_outputs.prepared.offset if isinstance(mm_encoder_outputs, PlannedEncoderOutputs) else 0
            model_inputs["image_attention_mask"] = _fed_mask_rows(image_attention_mask, model_inputs, offset)
        return model_inputs

    def _update_model_kwargs_for_generation(
        self, outputs, model_kwargs: dict[str, Any], is_encoder_decoder: bool = False, num_new_tokens: int = 1
    ) -> dict[str, Any]:
        # Replaces upstream IDEFICS's rule, which hands the step's image states back to be resampled at the next step
        # and keeps only the mask's last row: the states travel prepared in `mm_encoder_outputs`, and the mask grows
        # by the row a generated token sees (the last one), so that every forward reads its rows by position.
        model_kwargs = super(transformers.IdeficsForVisionText2Text, self)._update_model_kwargs_for_generation(
            outputs, model_kwargs, is_encoder_decoder=is_encoder_decoder, num_new_tokens=num_new_tokens
        )
        mask = model_kwargs.get("image_attention_mask")
        if mask is not None:
            model_kwargs["image_attention_mask"] = torch.cat([mask, *[mask[:, -1:]] * num_new_tokens], dim=1)
        return model_kwargs


def _fed_mask_rows(mask: torch.Tensor, model_inputs: dict, offset: int) -> torch.Tensor:
    """The rows of `image_attention_mask` (which starts at sequence position `offset`) of the tokens a forward feeds,
    from the cache's length on; tokens past its end see what its last row sees.

    Args:
        mask (`torch.Tensor` of shape `(batch_size, seq_len, num_images)`): the call's mask, grown while decoding.
        model_inputs (`dict`): the forward's inputs (its tokens and cache).
        offset (`int`): the sequence position of the mask's first row.

    Returns:
        `torch.Tensor` of shape `(batch_size, fed_tokens, num_images)`
    """
    tokens = model_inputs.get("input_ids")
    fed = (tokens if tokens is not None else model_inputs["inputs_embeds"]).shape[1]
    cache = model_inputs.get("cache")
    start = (cache.get_seq_length() if cache is not None else 0) - offset
    if start < 0:
        raise ValueError(
            f"`image_attention_mask` starts at position {offset} but the cache holds only {offset + start} tokens: "
            "pass one row per token of `input_ids`, `(batch_size, seq_len, num_images)`, as the processor does."
        )
    missing = start + fed - mask.shape[1]
    if missing > 0:  # tokens after the mask (drafts of assisted decoding) see what its last row sees, as upstream pads
        mask = torch.cat([mask, mask[:, -1:].expand(-1, missing, -1)], dim=1)
    return mask[:, start : start + fed]
