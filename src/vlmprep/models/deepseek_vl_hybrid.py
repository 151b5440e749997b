"""DeepSeek-VL-Hybrid: DeepSeek-VL with a SAM tower on a high-resolution copy of each image.

Every image is one run of SigLIP-patch placeholders; its features mix the SigLIP encoding of `pixel_values` with the
SAM encoding of `high_res_pixel_values` (one row per image too), so both are the image's pixel inputs: they are split
per image together and both go into its content hash.
"""

import transformers

from ..generation import VisionFacts, VisionPrepGenerationMixin
from .layouts.vision_patches import VisionPatchesLayout


class DeepseekVLHybridForConditionalGeneration(
    VisionPatchesLayout, VisionPrepGenerationMixin, transformers.DeepseekVLHybridForConditionalGeneration
):
    """Drop-in `transformers.DeepseekVLHybridForConditionalGeneration` whose vision towers run once, in input preparation.

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep.models.deepseek_vl_hybrid import DeepseekVLHybridForConditionalGeneration
    >>> config = transformers.DeepseekVLHybridConfig(
    ...     text_config={"model_type": "llama", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1},
    ...     vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
    ...                    "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 16, "patch_size": 4},
    ...     high_res_vision_config={"model_type": "sam_vision_model", "hidden_size": 32, "output_channels": 8,
    ...                             "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32,
    ...                             "patch_size": 4, "global_attn_indexes": [1], "window_size": 4, "mlp_dim": 64},
    ...     image_token_id=122,
    ... )
    >>> model = DeepseekVLHybridForConditionalGeneration(config).eval()
    >>> model.item_token_counts({})  # (16 / 4) ** 2 SigLIP patches
    16

    ```
    """

    # The low-resolution images have SigLIP's fixed resolution (the shape check reads the first pixel key); one
    # placeholder per SigLIP patch: the SAM features are resized to the same grid before the aligner mixes them.
    vision_facts = VisionFacts(pixel_keys=("pixel_values", "high_res_pixel_values"), per_image_keys=())
