"""DeepSeek-VL-Hybrid: DeepSeek-VL with a SAM tower on a high-resolution copy of each image.

Every image is one run of SigLIP-patch placeholders; its features mix the SigLIP encoding of `pixel_values` with the
SAM encoding of `high_res_pixel_values` (one row per image too), so both are the image's pixel inputs: they are split
per image together and both go into its content hash.
"""

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.vision_patches import VisionPatchesLayout


class DeepseekVLHybridForConditionalGeneration(
    VisionPatchesLayout, VisionPrepMixin, transformers.DeepseekVLHybridForConditionalGeneration
):
    """Drop-in `transformers.DeepseekVLHybridForConditionalGeneration` whose vision towers run once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.deepseek_vl_hybrid import DeepseekVLHybridForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_deepseek_vl_hybrid_config
    >>> model = DeepseekVLHybridForConditionalGeneration(tiny_deepseek_vl_hybrid_config()).eval()
    >>> model.item_token_counts({})  # (16 / 4) ** 2 SigLIP patches
    16

    ```
    """

    # The low-resolution images have SigLIP's fixed resolution (the shape check reads the first pixel key); one
    # placeholder per SigLIP patch: the SAM features are resized to the same grid before the aligner mixes them.
    vision_facts = VisionFacts(pixel_keys=("pixel_values", "high_res_pixel_values"), per_image_keys=())
