"""LLaVA-NeXT: "anyres" images, whose placeholder count depends on each image's size and the grid pinpoints."""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.anyres import AnyresCropsLayout


class LlavaNextForConditionalGeneration(
    AnyresCropsLayout, VisionPrepGenerationMixin, transformers.LlavaNextForConditionalGeneration
):
    """Drop-in `transformers.LlavaNextForConditionalGeneration` whose vision tower runs once, in input preparation.

    `pixel_values` is `(num_images, num_crops, channels, height, width)` and `image_sizes` `(num_images, 2)`; an
    image's placeholder count follows from its size, the grid pinpoints and the unpadding.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.llava_next import LlavaNextForConditionalGeneration
    >>> config = transformers.LlavaNextConfig(
    ...     text_config={"model_type": "llama", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1},
    ...     vision_config={"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
    ...                    "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 8, "patch_size": 4},
    ...     image_grid_pinpoints=[[8, 16], [16, 8]], image_token_index=122,
    ... )
    >>> model = LlavaNextForConditionalGeneration(config).eval()
    >>> model.item_token_counts({"image_sizes": torch.tensor([[8, 13], [13, 8]])})
    [14, 16]

    ```
    """
