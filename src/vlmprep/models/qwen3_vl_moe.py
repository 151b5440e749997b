"""Qwen3-VL-MoE: Qwen3-VL's vision side (flattened patches, per-frame video runs, deepstack) on a MoE decoder."""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.patch_grid import PatchGridPerFrameLayout


class Qwen3VLMoeForConditionalGeneration(
    PatchGridPerFrameLayout, VisionPrepGenerationMixin, transformers.Qwen3VLMoeForConditionalGeneration
):
    """Drop-in `transformers.Qwen3VLMoeForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.qwen3_vl_moe import Qwen3VLMoeForConditionalGeneration
    >>> text = {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    >>> text.update(head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    >>> text["rope_parameters"] = {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True}
    >>> vision = {"depth": 1, "hidden_size": 32, "out_hidden_size": 32, "num_heads": 2, "patch_size": 4}
    >>> vision.update(num_position_embeddings=16, deepstack_visual_indexes=[0])
    >>> config = transformers.Qwen3VLMoeConfig(text_config=text, vision_config=vision)
    >>> model = Qwen3VLMoeForConditionalGeneration(config).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, modality="video")
    [[4, 4]]

    ```
    """
