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

from .base import VisionPrepMixin, keeps_upstream_interface
from .layouts.qformer_queries import QFORMER_FACTS, InstructedQueriesLayout, check_instructions

INSTRUCTION_KEYS = ("qformer_input_ids", "qformer_attention_mask")


class InstructBlipWithGenerationLoop(transformers.InstructBlipForConditionalGeneration):
    """`transformers.InstructBlipForConditionalGeneration` whose `generate` is transformers' own loop on the whole
    model (upstream's hands embeddings to the language model's `generate`)."""

    generate = GenerationMixin.generate


class InstructBlipForConditionalGeneration(InstructedQueriesLayout, VisionPrepMixin, InstructBlipWithGenerationLoop):
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

    # Upstream's signature (its defaults too: the drop-in's `None` defaults serve `generate`'s calls without items)
    @keeps_upstream_interface(transformers.InstructBlipForConditionalGeneration.forward)
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        qformer_input_ids: torch.Tensor | None = None,
        qformer_attention_mask: torch.LongTensor | None = None,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        interpolate_pos_encoding: bool = False,
        mm_encoder_outputs: dict | None = None,
        **kwargs,
    ):
        """Upstream's forward, with upstream's parameters in upstream's order, which also takes calls without a image
        (decoding steps, prefill chunks of text: `QFormerQueriesLayout.prepare_query_forward`).

        Args:
            pixel_values, qformer_input_ids, qformer_attention_mask, input_ids, attention_mask, decoder_input_ids,
            decoder_attention_mask, inputs_embeds, labels, interpolate_pos_encoding, mm_encoder_outputs:
                as upstream's (`transformers.InstructBlipForConditionalGeneration.forward`); `pixel_values` and
                `qformer_input_ids` may be `None`.
            kwargs: handed to the language model, as upstream does (`cache`, `position_ids`, ...).

        Returns:
            upstream's output (`labels` give upstream's loss), with the language model's `cache` at the top.
        """
        inputs = {
            "pixel_values": pixel_values,
            "qformer_input_ids": qformer_input_ids,
            "qformer_attention_mask": qformer_attention_mask,
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": decoder_attention_mask,
            "inputs_embeds": inputs_embeds,
            "labels": labels,
            "interpolate_pos_encoding": interpolate_pos_encoding,
            "mm_encoder_outputs": mm_encoder_outputs,
        }
        return self.run_upstream_forward(inputs, kwargs)
