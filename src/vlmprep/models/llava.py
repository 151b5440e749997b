"""LLaVA: causal attention everywhere; a CLIP-like tower whose CLS token is dropped by the default strategy."""

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.vision_patches import VisionPatchesLayout


class LlavaForConditionalGeneration(VisionPatchesLayout, VisionPrepMixin, transformers.LlavaForConditionalGeneration):
    """Drop-in `transformers.LlavaForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep import LlavaForConditionalGeneration
    >>> from vlmprep.testing import tiny_llava_config
    >>> model = LlavaForConditionalGeneration(tiny_llava_config()).eval()

    ```
    """

    counts_cls_token = True  # the `"full"` feature select strategy keeps CLIP's CLS token
    vision_facts = VisionFacts(features_as_list=True)
