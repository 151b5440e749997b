"""T5Gemma 2: an encoder-decoder whose SigLIP features (pooled to `mm_tokens_per_image`) fill a run of placeholders
in the encoder's prompt, as Gemma3's do in its decoder's.

The vision tower sits in the encoder (`model.encoder.vision_tower`), its config under `config.encoder`. The encoder's
prompt is encoded once per call, its images from the encoder cache (`vlmprep.generation.encoder_prompt`); the decoder
is transformers'.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers

from ..generation import VisionFacts
from ..generation.validation import check_pixel_shapes
from .base import VisionPrepMixin
from .layouts.stated_counts import ENCODER_PROMPT_IMAGE


def pooled_tokens_per_image(config: transformers.T5Gemma2Config) -> int:
    """Placeholders per image: what the projector emits, `int(sqrt(mm_tokens_per_image)) ** 2`.

    The projector average-pools the patch grid to `tokens_per_side` squared tokens (as Gemma3's), so a non-square
    `mm_tokens_per_image` (2 in transformers' own tests) gives fewer tokens than the config field says.

    Args:
        config (`transformers.T5Gemma2Config`): the model config (the projector's is `config.encoder`).

    Returns:
        `int`
    """
    return int(config.encoder.mm_tokens_per_image**0.5) ** 2


class T5Gemma2ForConditionalGeneration(VisionPrepMixin, transformers.T5Gemma2ForConditionalGeneration):
    """Drop-in `transformers.T5Gemma2ForConditionalGeneration` whose vision tower runs once per distinct image, in
    input preparation: several prompts on one image encode it once.

    Example:

    ```python
    >>> from vlmprep.models.t5gemma2 import T5Gemma2ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_t5gemma2_config
    >>> model = T5Gemma2ForConditionalGeneration(tiny_t5gemma2_config()).eval()
    >>> model.item_token_counts({})  # `mm_tokens_per_image`, a square
    4

    ```
    """

    layout = ENCODER_PROMPT_IMAGE
    vision_facts = VisionFacts(tokens_per_image=pooled_tokens_per_image)

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        # The tower's config is the encoder's (`config.encoder.vision_config`), not a top-level `vision_config`
        pixel_values = model_kwargs.get("pixel_values")
        if modality == "image" and isinstance(pixel_values, torch.Tensor):
            check_pixel_shapes(pixel_values, self.config.encoder.vision_config)
