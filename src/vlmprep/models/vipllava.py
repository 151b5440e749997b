"""VipLLaVA: LLaVA with features from several vision layers; every image is one run of its patch tokens."""

import transformers

from ..generation import VisionFacts, VisionPrepGenerationMixin
from .layouts.vision_patches import VisionPatchesLayout


class VipLlavaForConditionalGeneration(
    VisionPatchesLayout, VisionPrepGenerationMixin, transformers.VipLlavaForConditionalGeneration
):
    """Drop-in `transformers.VipLlavaForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep.models.vipllava import VipLlavaForConditionalGeneration
    >>> config = transformers.VipLlavaConfig(
    ...     text_config={"model_type": "llama", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1},
    ...     vision_config={"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
    ...                    "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 16, "patch_size": 4},
    ...     image_token_index=122, vision_feature_layer=[-2, -1],
    ... )
    >>> model = VipLlavaForConditionalGeneration(config).eval()
    >>> model.item_token_counts({})  # (16 / 4) ** 2 patches; the CLS token is always dropped
    16

    ```
    """

    # One placeholder per patch: the model drops the CLS token of every selected layer.
    vision_facts = VisionFacts(per_image_keys=())
