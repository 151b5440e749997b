"""GLM-4V: Qwen2-VL-like inputs and M-RoPE positions; video frames reuse the image placeholder token."""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.patch_grid import PATCH_GRID_SHARED_PLACEHOLDER_FACTS, PatchGridPerFrameLayout


class Glm4vForConditionalGeneration(
    PatchGridPerFrameLayout, VisionPrepGenerationMixin, transformers.Glm4vForConditionalGeneration
):
    """Drop-in `transformers.Glm4vForConditionalGeneration` whose vision tower runs once, in input preparation.

    Images and videos are flattened patches with a `(t, h, w)` grid each; a video has one placeholder run per frame.
    As upstream, one forward cannot hold both image and video placeholders (the model finds both by one token id).

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.glm4v import Glm4vForConditionalGeneration
    >>> text = {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    >>> text["rope_parameters"] = {"rope_type": "default", "mrope_section": [2, 3, 3]}
    >>> vision = {"depth": 1, "hidden_size": 32, "out_hidden_size": 32, "intermediate_size": 32, "num_heads": 2}
    >>> vision.update(image_size=16, patch_size=4)
    >>> config = transformers.Glm4vConfig(text_config=text, vision_config=vision)
    >>> model = Glm4vForConditionalGeneration(config).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, modality="video")
    [[4, 4]]

    ```
    """

    # Video frames reuse the image placeholder: `mm_token_type_ids` (1 image, 2 video) tells them apart.
    vision_facts = PATCH_GRID_SHARED_PLACEHOLDER_FACTS
