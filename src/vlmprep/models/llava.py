"""LLaVA: causal attention everywhere; a CLIP-like tower whose CLS token is dropped by the default strategy."""

from typing import Any

import transformers

from ..generation import VisionFacts, VisionPrepGenerationMixin


class LlavaForConditionalGeneration(VisionPrepGenerationMixin, transformers.LlavaForConditionalGeneration):
    """Drop-in `transformers.LlavaForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep import LlavaForConditionalGeneration
    >>> from vlmprep.testing import tiny_llava_config
    >>> model = LlavaForConditionalGeneration(tiny_llava_config()).eval()

    ```
    """

    vision_facts = VisionFacts(features_as_list=True)

    def image_token_counts(self, model_kwargs: dict[str, Any]) -> int:
        """Patches per image, plus the CLS token when the `"full"` feature strategy keeps it."""
        vision_config = self.config.vision_config
        patches = (vision_config.image_size // vision_config.patch_size) ** 2
        strategy = model_kwargs.get("vision_feature_select_strategy") or self.config.vision_feature_select_strategy
        return patches + (1 if strategy == "full" else 0)
