"""GLM-4.6V (`glm46v`): GLM-4V's vision inputs and M-RoPE positions under its own config type."""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.patch_grid import PATCH_GRID_SHARED_PLACEHOLDER_FACTS, PatchGridPerFrameLayout


class Glm46VForConditionalGeneration(
    PatchGridPerFrameLayout, VisionPrepGenerationMixin, transformers.Glm46VForConditionalGeneration
):
    """Drop-in `transformers.Glm46VForConditionalGeneration` whose vision tower runs once, in input preparation.

    Inputs and positions as `vlmprep.models.glm4v`: images and videos are flattened patches with a `(t, h, w)` grid
    each, a video has one run of image placeholders per frame, told apart from images by `mm_token_type_ids`.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.glm46v import Glm46VForConditionalGeneration
    >>> text = {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    >>> text["rope_parameters"] = {"rope_type": "default", "mrope_section": [2, 3, 3]}
    >>> vision = {"depth": 1, "hidden_size": 32, "out_hidden_size": 32, "intermediate_size": 32, "num_heads": 2}
    >>> vision.update(image_size=16, patch_size=4)
    >>> config = transformers.Glm46VConfig(text_config=text, vision_config=vision)
    >>> model = Glm46VForConditionalGeneration(config).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    vision_facts = PATCH_GRID_SHARED_PLACEHOLDER_FACTS
