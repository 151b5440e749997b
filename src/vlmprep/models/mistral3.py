"""Mistral3 (Pixtral vision): any image size; an image's `[IMG]` placeholders come one run per row of merged patches.

The processor lays an image out as rows of `[IMG] * width` each closed by `[IMG_BREAK]` (the last by `[IMG_END]`);
the features fill the `[IMG]` tokens only, row by row. Each row is one piece of the image's span: a cache may end
anywhere (the model is causal) and the rows after it are fed.
"""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.pixtral import PixtralRowsLayout


class Mistral3ForConditionalGeneration(
    PixtralRowsLayout, VisionPrepGenerationMixin, transformers.Mistral3ForConditionalGeneration
):
    """Drop-in `transformers.Mistral3ForConditionalGeneration` whose vision tower runs once, in input preparation.

    `pixel_values` is `(num_images, C, max_height, max_width)` (padded) and `image_sizes` `(num_images, 2)`.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.mistral3 import Mistral3ForConditionalGeneration
    >>> config = transformers.Mistral3Config(
    ...     text_config={"model_type": "mistral", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16},
    ...     vision_config={"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
    ...                    "num_attention_heads": 2, "image_size": 16, "patch_size": 2},
    ...     image_token_index=122,
    ... )
    >>> model = Mistral3ForConditionalGeneration(config).eval()
    >>> model.item_token_counts({"image_sizes": torch.tensor([[8, 12]])})  # 2 rows of 3 `[IMG]`
    [[3, 3]]

    ```
    """
