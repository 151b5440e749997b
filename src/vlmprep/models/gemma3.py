"""Gemma3: each image's placeholder run attends to itself bidirectionally."""

import transformers

from ..generation import VisionFacts, VisionPrepGenerationMixin


class Gemma3ForConditionalGeneration(VisionPrepGenerationMixin, transformers.Gemma3ForConditionalGeneration):
    """Drop-in `transformers.Gemma3ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep import Gemma3ForConditionalGeneration
    >>> from vlmprep.testing import tiny_gemma3_config
    >>> model = Gemma3ForConditionalGeneration(tiny_gemma3_config()).eval()

    ```
    """

    vision_facts = VisionFacts(tokens_per_image_attr="mm_tokens_per_image", bidirectional="image")
