"""InstructBLIP: BLIP-2's Q-Former, which also reads the prompt's text (`qformer_input_ids`), so an image's features
depend on its instruction.

The processor writes each image as one run of `num_query_tokens` placeholders and returns, for each prompt, its text
as Q-Former ids (`qformer_input_ids`, `qformer_attention_mask`): one row per image. They are per-image inputs here,
encoded and hashed with the image, so an image re-sent with another instruction is encoded again (never taken from
the encoder cache), and a stored prefix holding it is not reused. A `cache` the caller passes holds whatever
instruction its images were encoded with. Upstream's `generate` and forward, and the Flan-T5 checkpoints the drop-in
refuses, are the Q-Former layout's (`layouts.qformer_queries`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import transformers
from transformers import GenerationMixin

from .base import VisionPrepMixin
from .layouts.qformer_queries import QFORMER_FACTS, QFormerQueriesLayout, check_instructions, with_language_model_cache

INSTRUCTION_KEYS = ("qformer_input_ids", "qformer_attention_mask")


class InstructBlipWithGenerationLoop(transformers.InstructBlipForConditionalGeneration):
    """`transformers.InstructBlipForConditionalGeneration` whose `generate` is transformers' own loop on the whole
    model (upstream's hands embeddings to the language model's `generate`)."""

    generate = GenerationMixin.generate


class InstructBlipForConditionalGeneration(QFormerQueriesLayout, VisionPrepMixin, InstructBlipWithGenerationLoop):
    """Drop-in `transformers.InstructBlipForConditionalGeneration` whose vision tower and Q-Former run once per image
    and instruction, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.instructblip import InstructBlipForConditionalGeneration
    >>> InstructBlipForConditionalGeneration.vision_facts.per_image_keys
    ('qformer_input_ids', 'qformer_attention_mask')

    ```
    """

    vision_facts = replace(QFORMER_FACTS, per_image_keys=INSTRUCTION_KEYS)

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Upstream's image checks, and one instruction row per image (`layouts.qformer_queries.check_instructions`).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): whose inputs to check.
        """
        super().check_pixel_inputs(model_kwargs, modality=modality)
        check_instructions(model_kwargs, self.count_items(model_kwargs, modality=modality), modality)

    def generate(
        self,
        pixel_values: torch.Tensor | None = None,
        qformer_input_ids: torch.LongTensor | None = None,
        qformer_attention_mask: torch.LongTensor | None = None,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        **kwargs,
    ):
        """Upstream's `generate` signature (`pixel_values` first), run by vlmprep's `generate`.

        Args:
            pixel_values (`torch.Tensor`, *optional*): `(num_images, C, H, W)`.
            qformer_input_ids (`torch.LongTensor`, *optional*): `(num_images, length)`, each image's instruction.
            qformer_attention_mask (`torch.LongTensor`, *optional*): their mask.
            input_ids (`torch.LongTensor`, *optional*):
                the prompt, each image a run of `num_query_tokens` placeholders; without it, as upstream, each image
                is captioned from its placeholders followed by the decoder's BOS token.
            attention_mask (`torch.LongTensor`, *optional*): the prompt's mask.
            kwargs: what vlmprep's `generate` takes; `interpolate_pos_encoding` only `False`.

        Returns:
            What transformers' `generate` returns: the prompt's ids followed by the generated ones.
        """
        instructions = {"qformer_input_ids": qformer_input_ids, "qformer_attention_mask": qformer_attention_mask}
        kwargs.update({key: value for key, value in instructions.items() if value is not None})
        inputs = self.caption_prompt(pixel_values, input_ids, {"attention_mask": attention_mask, **kwargs})
        return super().generate(inputs.pop("input_ids"), **inputs)

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        qformer_input_ids: torch.LongTensor | None = None,
        qformer_attention_mask: torch.LongTensor | None = None,
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

        Args:
            pixel_values, qformer_input_ids, qformer_attention_mask, input_ids, attention_mask, cache, position_ids,
            use_cache, logits_to_keep, inputs_embeds, mm_encoder_outputs, kwargs:
                what `transformers.InstructBlipForConditionalGeneration.forward` takes; `pixel_values` and
                `qformer_input_ids` may be `None` (the language model's inputs are named so `generate` sees them).

        Returns:
            `InstructBlipForConditionalGenerationModelOutput`, with the language model's `cache` at the top.
        """
        inputs = self.prepare_query_forward(
            {
                "pixel_values": pixel_values,
                "qformer_input_ids": qformer_input_ids,
                "qformer_attention_mask": qformer_attention_mask,
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "cache": cache,
                "position_ids": position_ids,
                "use_cache": use_cache,
                "inputs_embeds": inputs_embeds,
                "mm_encoder_outputs": mm_encoder_outputs,
            }
        )
        inputs.setdefault("qformer_input_ids", None)  # upstream's forward requires the argument
        return with_language_model_cache(super().forward(**inputs, logits_to_keep=logits_to_keep, **kwargs))
