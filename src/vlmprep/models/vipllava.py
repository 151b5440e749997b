"""VipLLaVA: LLaVA with features from several vision layers; every image is one run of its patch tokens."""

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.vision_patches import VisionPatchesLayout


class VipLlavaForConditionalGeneration(
    VisionPatchesLayout, VisionPrepMixin, transformers.VipLlavaForConditionalGeneration
):
    """Drop-in `transformers.VipLlavaForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.vipllava import VipLlavaForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_vipllava_config
    >>> model = VipLlavaForConditionalGeneration(tiny_vipllava_config()).eval()
    >>> model.item_token_counts({})  # (16 / 4) ** 2 patches; the CLS token is always dropped
    16

    ```
    """

    # One placeholder per patch: the model drops the CLS token of every selected layer.
    vision_facts = VisionFacts(per_image_keys=())
