"""Qwen2.5-VL: Qwen2-VL's inputs and M-RoPE positions (videos spaced in time by `second_per_grid_ts`)."""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.patch_grid import PatchGridLayout


class Qwen2_5_VLForConditionalGeneration(
    PatchGridLayout, VisionPrepGenerationMixin, transformers.Qwen2_5_VLForConditionalGeneration
):
    """Drop-in `transformers.Qwen2_5_VLForConditionalGeneration` whose vision tower runs once, in input preparation.

    Its windowed vision tower changes nothing here: images and videos are still flattened patches with a grid each,
    and `second_per_grid_ts` reaches the model's own `get_rope_index` with the grids.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.qwen2_5_vl import Qwen2_5_VLForConditionalGeneration
    >>> text = {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    >>> text.update(bos_token_id=2, eos_token_id=1)
    >>> text["rope_parameters"] = {"rope_type": "default", "mrope_section": [2, 3, 3]}
    >>> vision = {"depth": 1, "hidden_size": 32, "out_hidden_size": 32, "num_heads": 2, "patch_size": 4}
    >>> config = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision)
    >>> model = Qwen2_5_VLForConditionalGeneration(config).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, modality="video")
    [8]

    ```
    """
