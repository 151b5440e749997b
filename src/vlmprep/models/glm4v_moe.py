"""GLM-4.5V (`glm4v_moe`): GLM-4V's vision inputs and M-RoPE positions on a mixture-of-experts decoder."""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.patch_grid import PATCH_GRID_SHARED_PLACEHOLDER_FACTS, PatchGridPerFrameLayout


class Glm4vMoeForConditionalGeneration(
    PatchGridPerFrameLayout, VisionPrepGenerationMixin, transformers.Glm4vMoeForConditionalGeneration
):
    """Drop-in `transformers.Glm4vMoeForConditionalGeneration` whose vision tower runs once, in input preparation.

    Inputs and positions as `vlmprep.models.glm4v`: images and videos are flattened patches with a `(t, h, w)` grid
    each, a video has one run of image placeholders per frame, told apart from images by `mm_token_type_ids`.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.glm4v_moe import Glm4vMoeForConditionalGeneration
    >>> text = {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
    >>> text.update(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    >>> text["rope_parameters"] = {"rope_type": "default", "mrope_section": [1, 1, 2], "partial_rotary_factor": 0.5}
    >>> vision = {"depth": 1, "hidden_size": 32, "out_hidden_size": 32, "intermediate_size": 32, "num_heads": 2}
    >>> vision.update(image_size=16, patch_size=4)
    >>> config = transformers.Glm4vMoeConfig(text_config=text, vision_config=vision)
    >>> model = Glm4vMoeForConditionalGeneration(config).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, modality="video")
    [[4, 4]]

    ```
    """

    vision_facts = PATCH_GRID_SHARED_PLACEHOLDER_FACTS
