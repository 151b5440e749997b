"""DeepSeek-VL: a SigLIP tower at fixed resolution; every image is one run of its patch tokens."""

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.vision_patches import VisionPatchesLayout


class DeepseekVLForConditionalGeneration(
    VisionPatchesLayout, VisionPrepMixin, transformers.DeepseekVLForConditionalGeneration
):
    """Drop-in `transformers.DeepseekVLForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.deepseek_vl import DeepseekVLForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_deepseek_vl_config
    >>> model = DeepseekVLForConditionalGeneration(tiny_deepseek_vl_config()).eval()
    >>> model.item_token_counts({})  # (16 / 4) ** 2 patches
    16

    ```
    """

    # Images have the tower's fixed resolution and no extra per-image inputs; the aligner maps every SigLIP patch
    # (there is no CLS token) to one placeholder.
    vision_facts = VisionFacts(per_image_keys=())
