"""Gemma3: each image's placeholder run attends to itself bidirectionally."""

from typing import Any

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.stated_counts import FIXED_IMAGE


class Gemma3ForConditionalGeneration(VisionPrepMixin, transformers.Gemma3ForConditionalGeneration):
    """Drop-in `transformers.Gemma3ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep import Gemma3ForConditionalGeneration
    >>> from vlmprep.testing import tiny_gemma3_config
    >>> model = Gemma3ForConditionalGeneration(tiny_gemma3_config()).eval()

    ```
    """

    layout = FIXED_IMAGE

    vision_facts = VisionFacts(bidirectional="image")

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int:
        """Placeholder tokens per image: what the projector emits, `int(sqrt(mm_tokens_per_image)) ** 2`.

        The projector average-pools the patch grid to `tokens_per_side` squared tokens, so a non-square
        `mm_tokens_per_image` (e.g. 2) gives fewer tokens than the config field says; the model's own count wins.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (unused: every image has the same count).
            modality (`str`, *optional*, defaults to `"image"`): Gemma3 has images only.

        Returns:
            `int`
        """
        return self.model.multi_modal_projector.tokens_per_side**2
