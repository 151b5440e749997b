"""Qwen3-VL: Qwen2-VL's inputs and positions, videos as one placeholder run per frame, and deepstack features."""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.patch_grid import PatchGridPerFrameLayout


class Qwen3VLForConditionalGeneration(
    PatchGridPerFrameLayout, VisionPrepGenerationMixin, transformers.Qwen3VLForConditionalGeneration
):
    """Drop-in `transformers.Qwen3VLForConditionalGeneration` whose vision tower runs once, in input preparation.

    The vision tower's deepstack features (added to the first text layers' hidden states at the placeholders) are
    kept with each image's features and fed to the same placeholders, chunk by chunk.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.qwen3_vl import Qwen3VLForConditionalGeneration
    >>> text = {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    >>> text.update(head_dim=16, bos_token_id=2, eos_token_id=1)
    >>> text["rope_parameters"] = {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True}
    >>> vision = {"depth": 1, "hidden_size": 32, "out_hidden_size": 32, "num_heads": 2, "patch_size": 4}
    >>> vision.update(num_position_embeddings=16, deepstack_visual_indexes=[0])
    >>> config = transformers.Qwen3VLConfig(text_config=text, vision_config=vision)
    >>> model = Qwen3VLForConditionalGeneration(config).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, modality="video")
    [[4, 4]]

    ```
    """
