"""BLIP-2: a ViT, then a Q-Former whose `num_query_tokens` learned queries cross-attend to the image; their projected
outputs fill one run of `num_query_tokens` image placeholders in the prompt of a decoder-only language model.

The processor writes each image as that run before the prompt's text. The Q-Former reads only the image (and its
learned queries), so an image's features depend on its pixels alone.

Upstream's `generate` encodes the image and calls the language model's `generate` on input embeddings, and its
forward needs `pixel_values` on every call. The drop-in runs vlmprep's `generate` (the image encoded once, in input
preparation), and its forward also takes the calls that carry no image (decoding steps, prefill chunks of text).
Flan-T5 checkpoints (an encoder-decoder language model) are refused: `vlmprep.AutoModelForImageTextToText` loads them
as transformers' class, with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import transformers
from transformers import Cache, GenerationMixin
from transformers.models.blip_2.modeling_blip_2 import (
    BaseModelOutputWithVisionQformerOutputs,
    Blip2ForConditionalGenerationModelOutput,
)

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.stated_counts import FixedImageLayout


def encoder_decoder_refusal(config: transformers.PreTrainedConfig) -> str | None:
    """Why a BLIP-2 or InstructBLIP config has no drop-in: an encoder-decoder language model (Flan-T5), or `None`.

    Args:
        config (`PreTrainedConfig`): the model's config.

    Returns:
        `str` or `None`
    """
    if config.use_decoder_only_language_model:
        return None
    return (
        f"this checkpoint's language model ({config.text_config.model_type}) is an encoder-decoder, whose encoder "
        "takes the image and the prompt together: there is no decoder-only prefill to prepare. Load it with "
        f"`transformers.{type(config).__name__.replace('Config', 'ForConditionalGeneration')}`."
    )


@dataclass
class Blip2GenerationOutput(Blip2ForConditionalGenerationModelOutput):
    """Upstream's output, plus the language model's `cache`, `hidden_states` and `attentions` at the top, where
    `generate` reads them (upstream's `generate` reads them from the language model's own output).

    Args:
        cache (`Cache`, *optional*): the language model's cache after this forward.
        hidden_states (`tuple[torch.Tensor]`, *optional*): the language model's hidden states, when asked for.
        attentions (`tuple[torch.Tensor]`, *optional*): the language model's attentions, when asked for.
    """

    cache: Cache | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def query_rows(rows) -> BaseModelOutputWithVisionQformerOutputs:
    """vlmprep's feature rows in the container upstream's forward reads (`pooler_output`, `qformer_outputs`, ...)."""
    return BaseModelOutputWithVisionQformerOutputs(
        pooler_output=rows.pooler_output, last_hidden_state=rows.pooler_output
    )


class Blip2WithGenerationLoop(transformers.Blip2ForConditionalGeneration):
    """`transformers.Blip2ForConditionalGeneration` whose `generate` is transformers' own loop on the whole model.

    Upstream's `generate` encodes the images and hands embeddings to the language model's `generate`; vlmprep's
    `generate` (the mixin, listed before this class) reaches this one, which runs every forward through the model.
    """

    generate = GenerationMixin.generate


class Blip2ForConditionalGeneration(FixedImageLayout, VisionPrepMixin, Blip2WithGenerationLoop):
    """Drop-in `transformers.Blip2ForConditionalGeneration` whose vision tower and Q-Former run once, in input
    preparation.

    Example:

    ```python
    >>> from vlmprep.models.blip_2 import Blip2ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_blip_2_config
    >>> model = Blip2ForConditionalGeneration(tiny_blip_2_config()).eval()
    >>> model.item_token_counts({})  # one run of the Q-Former's queries per image
    4

    ```
    """

    # Upstream's `generate` takes `pixel_values` first; vlmprep's `generate` prepares them from the prompt's ids.
    main_input_name = "input_ids"
    vision_facts = VisionFacts(tokens_per_image_attr="num_query_tokens", per_image_keys=())

    @classmethod
    def config_refusal(cls, config: transformers.PreTrainedConfig) -> str | None:
        """Why this config has no drop-in (a Flan-T5 language model), or `None`.

        Args:
            config (`PreTrainedConfig`): the model's config.

        Returns:
            `str` or `None`
        """
        return encoder_decoder_refusal(config)

    def generate(
        self,
        pixel_values: torch.Tensor | None = None,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        interpolate_pos_encoding: bool = False,
        **kwargs,
    ):
        """Upstream's `generate` signature (`pixel_values` first), run by vlmprep's `generate`.

        Args:
            pixel_values (`torch.Tensor`, *optional*): `(num_images, C, H, W)`.
            input_ids (`torch.LongTensor`, *optional*):
                the prompt, each image a run of `num_query_tokens` placeholders; without it, as upstream, each image
                is captioned from its placeholders followed by the decoder's BOS token.
            attention_mask (`torch.LongTensor`, *optional*): the prompt's mask.
            interpolate_pos_encoding (`bool`, *optional*, defaults to `False`): only `False` (images at the tower's size).
            kwargs: what `vlmprep`'s `generate` takes (generation config, `prefix_cache`, `encoder_cache`, ...).

        Returns:
            What transformers' `generate` returns: the prompt's ids followed by the generated ones.
        """
        if interpolate_pos_encoding:
            raise ValueError(
                "`interpolate_pos_encoding=True` is not supported by the vlmprep drop-in: resize the images to the "
                "vision tower's `image_size` (the processor does), or use transformers' class."
            )
        if input_ids is None and kwargs.get("inputs_embeds") is None and pixel_values is not None:
            # Upstream's captioning prompt: each image's placeholders, then BOS.
            prompt = [self.config.image_token_id] * self.config.num_query_tokens + [
                self.config.text_config.bos_token_id
            ]
            input_ids = torch.tensor([prompt], device=pixel_values.device).repeat(pixel_values.shape[0], 1)
        if pixel_values is not None:
            kwargs["pixel_values"] = pixel_values
        if attention_mask is None and input_ids is not None:
            # As upstream: every token attended (transformers' default would mask the decoder's pad id)
            attention_mask = torch.ones_like(input_ids)
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        return super().generate(input_ids, **kwargs)

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        cache=None,
        position_ids: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        inputs_embeds: torch.Tensor | None = None,
        mm_encoder_outputs: dict | None = None,
        **kwargs,
    ):
        """Upstream's forward, which also takes calls without an image (decoding steps, text-only prefill chunks).

        The language model's inputs (`cache`, `position_ids`, `use_cache`, `logits_to_keep`) are named here, so that
        `generate` sees the forward takes them; upstream's forward hands them to the language model.

        Args:
            pixel_values, input_ids, attention_mask, cache, position_ids, use_cache, logits_to_keep, inputs_embeds,
            mm_encoder_outputs, kwargs:
                what `transformers.Blip2ForConditionalGeneration.forward` takes; `pixel_values` may be `None`.

        Returns:
            `Blip2GenerationOutput`: upstream's output, with the language model's cache at the top.
        """
        rows = (mm_encoder_outputs or {}).get("image")
        if pixel_values is None and not isinstance(rows, BaseModelOutputWithVisionQformerOutputs):
            if rows is None:
                # No image in this call: upstream would encode `pixel_values`; its scatter gets no rows instead. The
                # ids are embedded here and no position is a placeholder, so a generated placeholder id stays the
                # token it is (as in upstream's `generate`, which decodes with the language model alone).
                if inputs_embeds is None:
                    inputs_embeds = self.get_input_embeddings()(input_ids)
                rows = BaseModelOutputWithVisionQformerOutputs(pooler_output=inputs_embeds.new_zeros((0,)))
                input_ids = torch.full(inputs_embeds.shape[:2], -1, device=inputs_embeds.device)
            mm_encoder_outputs = {**(mm_encoder_outputs or {}), "image": query_rows(rows)}
        if attention_mask is None:
            # `generate` drops an all-ones mask; upstream's forward would then attend to this call's tokens only, not
            # to the cached ones before them (its own `generate` always passes the whole mask to the language model).
            embeds_or_ids = input_ids if inputs_embeds is None else inputs_embeds
            past = cache.get_seq_length() if cache is not None else 0
            shape = (embeds_or_ids.shape[0], past + embeds_or_ids.shape[1])
            attention_mask = torch.ones(shape, dtype=torch.long, device=embeds_or_ids.device)
        language_model_inputs = {"cache": cache, "position_ids": position_ids, "use_cache": use_cache}
        language_model_inputs = {key: value for key, value in language_model_inputs.items() if value is not None}
        output = super().forward(
            pixel_values=pixel_values,
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            mm_encoder_outputs=mm_encoder_outputs,
            logits_to_keep=logits_to_keep,
            **language_model_inputs,
            **kwargs,
        )
        language_model_output = output.language_model_outputs
        return Blip2GenerationOutput(
            **output,
            cache=getattr(language_model_output, "cache", None),
            hidden_states=getattr(language_model_output, "hidden_states", None),
            attentions=getattr(language_model_output, "attentions", None),
        )
