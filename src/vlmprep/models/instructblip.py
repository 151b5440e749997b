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

import transformers
from transformers import GenerationMixin

from .base import VisionPrepMixin
from .layouts.qformer_queries import QFORMER_FACTS, InstructedQueriesLayout, check_instructions, upstream_forward

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

    forward = upstream_forward(transformers.InstructBlipForConditionalGeneration)
