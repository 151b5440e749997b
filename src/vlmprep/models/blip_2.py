"""BLIP-2: a ViT, then a Q-Former whose `num_query_tokens` learned queries cross-attend to the image; their projected
outputs fill one run of `num_query_tokens` image placeholders in the prompt of a decoder-only language model.

The processor writes each image as that run before the prompt's text. The Q-Former reads only the image (and its
learned queries), so an image's features depend on its pixels alone. Upstream's `generate` and forward, and the Flan-T5
checkpoints the drop-in refuses, are the Q-Former layout's (`layouts.qformer_queries`).
"""

from __future__ import annotations

import torch
import transformers
from transformers import GenerationMixin

from .base import VisionPrepMixin
from .layouts.qformer_queries import QFORMER_FACTS, QFormerQueriesLayout, with_language_model_cache


class Blip2WithGenerationLoop(transformers.Blip2ForConditionalGeneration):
    """`transformers.Blip2ForConditionalGeneration` whose `generate` is transformers' own loop on the whole model.

    Upstream's `generate` encodes the images and hands embeddings to the language model's `generate`; vlmprep's
    `generate` (the mixin, listed before this class) reaches this one, which runs every forward through the model.
    """

    generate = GenerationMixin.generate


class Blip2ForConditionalGeneration(QFormerQueriesLayout, VisionPrepMixin, Blip2WithGenerationLoop):
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

    vision_facts = QFORMER_FACTS

    def generate(
        self,
        pixel_values: torch.Tensor | None = None,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        **kwargs,
    ):
        """Upstream's `generate` signature (`pixel_values` first), run by vlmprep's `generate`.

        Args:
            pixel_values (`torch.Tensor`, *optional*): `(num_images, C, H, W)`.
            input_ids (`torch.LongTensor`, *optional*):
                the prompt, each image a run of `num_query_tokens` placeholders; without it, as upstream, each image
                is captioned from its placeholders followed by the decoder's BOS token.
            attention_mask (`torch.LongTensor`, *optional*): the prompt's mask.
            kwargs: what vlmprep's `generate` takes (generation options, `prefix_cache`, `cache_salt`, ...);
                `interpolate_pos_encoding` only `False`.

        Returns:
            What transformers' `generate` returns: the prompt's ids followed by the generated ones.
        """
        inputs = self.caption_prompt(pixel_values, input_ids, {"attention_mask": attention_mask, **kwargs})
        return super().generate(inputs.pop("input_ids"), **inputs)

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
            `Blip2ForConditionalGenerationModelOutput`, with the language model's `cache` at the top.
        """
        inputs = self.prepare_query_forward(
            {
                "pixel_values": pixel_values,
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "cache": cache,
                "position_ids": position_ids,
                "use_cache": use_cache,
                "inputs_embeds": inputs_embeds,
                "mm_encoder_outputs": mm_encoder_outputs,
            }
        )
        return with_language_model_cache(super().forward(**inputs, logits_to_keep=logits_to_keep, **kwargs))
