"""DeepSeek-VL: a SigLIP tower at fixed resolution; every image is one run of its patch tokens."""

import transformers

from ..generation import VisionFacts, VisionPrepGenerationMixin
from .layouts.vision_patches import VisionPatchesLayout


class DeepseekVLForConditionalGeneration(
    VisionPatchesLayout, VisionPrepGenerationMixin, transformers.DeepseekVLForConditionalGeneration
):
    """Drop-in `transformers.DeepseekVLForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep.models.deepseek_vl import DeepseekVLForConditionalGeneration
    >>> config = transformers.DeepseekVLConfig(
    ...     text_config={"model_type": "llama", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1},
    ...     vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
    ...                    "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 16, "patch_size": 4},
    ...     image_token_id=122,
    ... )
    >>> model = DeepseekVLForConditionalGeneration(config).eval()
    >>> model.item_token_counts({})  # (16 / 4) ** 2 patches
    16

    ```
    """

    # Images have the tower's fixed resolution and no extra per-image inputs; the aligner maps every SigLIP patch
    # (there is no CLS token) to one placeholder.
    vision_facts = VisionFacts(per_image_keys=())
