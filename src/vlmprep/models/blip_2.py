"""BLIP-2: a ViT, then a Q-Former whose `num_query_tokens` learned queries cross-attend to the image; their projected
outputs fill one run of `num_query_tokens` image placeholders in the prompt of a decoder-only language model.

The processor writes each image as that run before the prompt's text. The Q-Former reads only the image (and its
learned queries), so an image's features depend on its pixels alone. Upstream's `generate` and forward, and the Flan-T5
checkpoints the drop-in refuses, are the Q-Former layout's (`layouts.qformer_queries`).
"""

from __future__ import annotations

import transformers
from transformers import GenerationMixin

from .base import VisionPrepMixin
from .layouts.qformer_queries import QFORMER_FACTS, QFormerQueriesLayout, upstream_forward


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

    forward = upstream_forward(transformers.Blip2ForConditionalGeneration)
