"""InstructBLIP-Video: InstructBLIP on videos only. Each frame of a video goes through the vision tower and the
Q-Former (with the video's instruction, `qformer_input_ids`), and the frames' `num_query_tokens` projected queries,
in frame order, fill one run of `num_query_tokens * frames` video placeholders (`video_token_id`).

`pixel_values` is `(videos, frames, C, H, W)`; the config has no image placeholder, so the family's only modality is
the video (`VisionFacts.has_images=False`). As for InstructBLIP, a video's instruction is a per-item input, encoded and
hashed with it. Upstream's `generate` and forward, and the Flan-T5 checkpoints the drop-in refuses, are the Q-Former
layout's (`layouts.qformer_queries`).
"""

from __future__ import annotations

from typing import Any

import torch
import transformers
from transformers import GenerationMixin

from ..generation import VisionFacts
from ..generation.facts import ModalityFacts
from ..generation.validation import check_pixel_dims
from .base import VisionPrepMixin, keeps_upstream_interface
from .layouts.qformer_queries import InstructedQueriesLayout, check_instructions

INSTRUCTION_KEYS = ("qformer_input_ids", "qformer_attention_mask")

VIDEO = ModalityFacts("video", "video_token_id", ("pixel_values",), per_item_keys=INSTRUCTION_KEYS)


class InstructBlipVideoWithGenerationLoop(transformers.InstructBlipVideoForConditionalGeneration):
    """`transformers.InstructBlipVideoForConditionalGeneration` whose `generate` is transformers' own loop on the
    whole model (upstream's hands embeddings to the language model's `generate`)."""

    generate = GenerationMixin.generate


class InstructBlipVideoForConditionalGeneration(
    InstructedQueriesLayout, VisionPrepMixin, InstructBlipVideoWithGenerationLoop
):
    """Drop-in `transformers.InstructBlipVideoForConditionalGeneration` whose vision tower and Q-Former run once per
    video and instruction, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.instructblipvideo import InstructBlipVideoForConditionalGeneration
    >>> [modality.name for modality in InstructBlipVideoForConditionalGeneration.vision_facts.modalities]
    ['video']

    ```
    """

    vision_facts = VisionFacts(has_images=False, per_image_keys=(), other_modalities=(VIDEO,))

    def count_items(self, model_kwargs: dict[str, Any], modality: str = "video") -> int | None:
        """How many videos `pixel_values` holds, once its shape is checked: `(videos, frames, C, H, W)` at the tower's
        size (a video without its video dimension would otherwise count its frames as videos).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"video"`): whose items to count.

        Returns:
            `int` or `None`
        """
        pixel_values = model_kwargs.get("pixel_values")
        if isinstance(pixel_values, torch.Tensor):
            check_pixel_dims(pixel_values, self.config.vision_config, ("num_videos", "frames"))
        return super().count_items(model_kwargs, modality=modality)

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "video") -> None:
        """One instruction row per video (the pixels' shape is checked as they are counted).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"video"`): whose inputs to check.
        """
        check_instructions(model_kwargs, self.count_items(model_kwargs, modality=modality), modality)

    # Upstream's signature (its defaults too: the drop-in's `None` defaults serve `generate`'s calls without items)
    @keeps_upstream_interface(transformers.InstructBlipVideoForConditionalGeneration.forward)
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
        use_cache: bool | None = None,
        mm_encoder_outputs: dict | None = None,
        **kwargs,
    ):
        """Upstream's forward, with upstream's parameters in upstream's order, which also takes calls without a video
        (decoding steps, prefill chunks of text: `QFormerQueriesLayout.prepare_query_forward`).

        Args:
            pixel_values, qformer_input_ids, qformer_attention_mask, input_ids, attention_mask, decoder_input_ids,
            decoder_attention_mask, inputs_embeds, labels, interpolate_pos_encoding, use_cache, mm_encoder_outputs:
                as upstream's (`transformers.InstructBlipVideoForConditionalGeneration.forward`); `pixel_values` and
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
            "use_cache": use_cache,
            "mm_encoder_outputs": mm_encoder_outputs,
        }
        return self.run_upstream_forward(inputs, kwargs)
