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
from .base import VisionPrepMixin
from .layouts.qformer_queries import QFormerQueriesLayout, check_instructions, with_language_model_cache

INSTRUCTION_KEYS = ("qformer_input_ids", "qformer_attention_mask")

VIDEO = ModalityFacts("video", "video_token_id", ("pixel_values",), per_item_keys=INSTRUCTION_KEYS)


class InstructBlipVideoWithGenerationLoop(transformers.InstructBlipVideoForConditionalGeneration):
    """`transformers.InstructBlipVideoForConditionalGeneration` whose `generate` is transformers' own loop on the
    whole model (upstream's hands embeddings to the language model's `generate`)."""

    generate = GenerationMixin.generate


class InstructBlipVideoForConditionalGeneration(
    QFormerQueriesLayout, VisionPrepMixin, InstructBlipVideoWithGenerationLoop
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
            pixel_values (`torch.Tensor`, *optional*): `(num_videos, frames, C, H, W)`.
            qformer_input_ids (`torch.LongTensor`, *optional*): `(num_videos, length)`, each video's instruction.
            qformer_attention_mask (`torch.LongTensor`, *optional*): their mask.
            input_ids (`torch.LongTensor`, *optional*):
                the prompt, each video a run of `num_query_tokens * frames` placeholders; without it, as upstream,
                each video is captioned from its placeholders followed by the decoder's BOS token.
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
        """Upstream's forward, which also takes calls without a video (decoding steps, text-only prefill chunks).

        Args:
            pixel_values, qformer_input_ids, qformer_attention_mask, input_ids, attention_mask, cache, position_ids,
            use_cache, logits_to_keep, inputs_embeds, mm_encoder_outputs, kwargs:
                what `transformers.InstructBlipVideoForConditionalGeneration.forward` takes; `pixel_values` and
                `qformer_input_ids` may be `None` (the language model's inputs are named so `generate` sees them).

        Returns:
            `InstructBlipVideoForConditionalGenerationModelOutput`, with the language model's `cache` at the top.
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
