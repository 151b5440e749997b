"""LightOnOCR: Pixtral vision at any image size; an image is one run of `rows * columns` placeholders (no breaks)."""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.pixtral import PixtralImagesLayout


class LightOnOcrForConditionalGeneration(
    PixtralImagesLayout, VisionPrepGenerationMixin, transformers.LightOnOcrForConditionalGeneration
):
    """Drop-in `transformers.LightOnOcrForConditionalGeneration` whose vision tower runs once, in input preparation.

    `pixel_values` is `(num_images, C, max_height, max_width)` (padded) and `image_sizes` `(num_images, 2)`.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.lighton_ocr import LightOnOcrForConditionalGeneration
    >>> config = transformers.LightOnOcrConfig(
    ...     text_config={"model_type": "qwen3", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16},
    ...     vision_config={"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
    ...                    "num_attention_heads": 2, "image_size": 16, "patch_size": 2},
    ...     image_token_id=122,
    ... )
    >>> model = LightOnOcrForConditionalGeneration(config).eval()
    >>> model.item_token_counts({"image_sizes": torch.tensor([[8, 12]])})  # 2 x 3 merged patches
    [6]

    ```
    """
