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

from .base import VisionPrepMixin, keeps_upstream_interface
from .layouts.qformer_queries import QFORMER_FACTS, QFormerQueriesLayout


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

    # Upstream's signature (its defaults too: the drop-in's `None` defaults serve `generate`'s calls without items)
    @keeps_upstream_interface(transformers.Blip2ForConditionalGeneration.forward)
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        interpolate_pos_encoding: bool = False,
        mm_encoder_outputs: dict | None = None,
        **kwargs,
    ):
        """Upstream's forward, with upstream's parameters in upstream's order, which also takes calls without an image
        (decoding steps, prefill chunks of text: `QFormerQueriesLayout.prepare_query_forward`).

        Args:
            pixel_values, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, inputs_embeds, labels,
            interpolate_pos_encoding, mm_encoder_outputs:
                as upstream's (`transformers.Blip2ForConditionalGeneration.forward`); `pixel_values` may be `None`.
            kwargs: handed to the language model, as upstream does (`cache`, `position_ids`, `use_cache`, ...).

        Returns:
            upstream's output (`labels` give upstream's loss), with the language model's `cache` at the top.
        """
        inputs = {
            "pixel_values": pixel_values,
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
