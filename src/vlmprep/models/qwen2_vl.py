"""Qwen2-VL: images and videos as flattened patches on a (t, h, w) grid, and multimodal rope (M-RoPE) positions."""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.patch_grid import PatchGridLayout


class Qwen2VLForConditionalGeneration(
    PatchGridLayout, VisionPrepGenerationMixin, transformers.Qwen2VLForConditionalGeneration
):
    """Drop-in `transformers.Qwen2VLForConditionalGeneration` whose vision tower runs once, in input preparation.

    Images and videos are encoded once each, only when prefill needs them; positions come from the prompt alone, so
    a cached conversation can get new images and requests can interleave.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.qwen2_vl import Qwen2VLForConditionalGeneration
    >>> text = {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    >>> text.update(bos_token_id=2, eos_token_id=1)
    >>> text["rope_parameters"] = {"rope_type": "default", "mrope_section": [2, 3, 3]}
    >>> vision = {"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "patch_size": 4}
    >>> config = transformers.Qwen2VLConfig(text_config=text, vision_config=vision)
    >>> model = Qwen2VLForConditionalGeneration(config).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """
