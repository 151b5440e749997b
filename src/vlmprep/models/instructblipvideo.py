"""InstructBLIP-Video: InstructBLIP on videos only. Each frame of a video goes through the vision tower and the
Q-Former (with the video's instruction, `qformer_input_ids`), and the frames' `num_query_tokens` projected queries,
in frame order, fill one run of `num_query_tokens * frames` video placeholders (`video_token_id`).

`pixel_values` is `(videos, frames, C, H, W)`; the config has no image placeholder, so the family's only modality is
the video (`VisionFacts.placeholder_attr=None`). As for InstructBLIP, a video's instruction is a per-item input, encoded and
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
from .base import VisionPrepMixin
from .layouts.qformer_queries import InstructedQueriesLayout, check_instructions, upstream_forward

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

    vision_facts = VisionFacts(placeholder_attr=None, per_image_keys=(), other_modalities=(VIDEO,))

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "video") -> None:
        """`pixel_values` `(videos, frames, C, H, W)` at the tower's size (a video without its video dimension would
        count its frames as videos), and one instruction row per video.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"video"`): whose inputs to check.
        """
        pixel_values = model_kwargs.get("pixel_values")
        if isinstance(pixel_values, torch.Tensor):
            check_pixel_dims(pixel_values, self.config.vision_config, ("num_videos", "frames"))
        check_instructions(model_kwargs, self.count_items(model_kwargs, modality=modality), modality)

    forward = upstream_forward(transformers.InstructBlipVideoForConditionalGeneration)
