"""BLIP-2: a ViT, then a Q-Former whose `num_query_tokens` learned queries cross-attend to the image; their projected
outputs fill one run of `num_query_tokens` image placeholders in the prompt of a decoder-only language model.

The processor writes each image as that run before the prompt's text. The Q-Former reads only the image (and its
learned queries), so an image's features depend on its pixels alone. Upstream's `generate` and forward, and the Flan-T5
checkpoints the drop-in refuses, are the Q-Former layout's (`layouts.qformer_queries`).
"""

from __future__ import annotations

from typing import Any

import torch
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

    def caption_prompt(self, pixel_values: torch.Tensor, input_ids: torch.Tensor | None, kwargs: dict) -> dict:
        """`QFormerQueriesLayout.caption_prompt`, `interpolate_pos_encoding` kept for the vision tower.

        BLIP-2's tower interpolates its position embeddings to larger images and the Q-Former still gives
        `num_query_tokens` rows per image, so the prompt is unchanged; the flag reaches `get_image_features` as one of
        its arguments, and is hashed with each image, so an encoder-cache entry made under the other flag never serves.

        Args:
            pixel_values (`torch.Tensor`, *optional*): the images' pixels.
            input_ids (`torch.Tensor`, *optional*): the prompt.
            kwargs (`dict`): the call's other arguments.

        Returns:
            `dict`: the arguments of vlmprep's `generate`.
        """
        interpolate = kwargs.pop("interpolate_pos_encoding", False)
        prepared = super().caption_prompt(pixel_values, input_ids, kwargs)
        if interpolate:  # `False` is upstream's default: left out, so it keys the cache as a call without it
            prepared["interpolate_pos_encoding"] = True
        return prepared

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """The fixed-resolution check, relaxed to any size with `interpolate_pos_encoding=True` (upstream's too).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): images only.
        """
        pixel_values = model_kwargs.get("pixel_values")
        if not model_kwargs.get("interpolate_pos_encoding") or not isinstance(pixel_values, torch.Tensor):
            super().check_pixel_inputs(model_kwargs, modality)
            return
        channels = 3  # the patch embedding is a three-channel convolution (no `num_channels` in the config)
        if pixel_values.ndim != 4 or pixel_values.shape[1] != channels:
            raise ValueError(
                f"`pixel_values` has shape {tuple(pixel_values.shape)} but this model's vision tower takes "
                f"(num_images, {channels}, height, width)."
            )
