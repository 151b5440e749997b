"""SmolVLM: Idefics3's layout (sub-images, each its own placeholder run); video frames come as sub-images too."""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.sub_images import SubImagesLayout


class SmolVLMForConditionalGeneration(
    SubImagesLayout, VisionPrepGenerationMixin, transformers.SmolVLMForConditionalGeneration
):
    """Drop-in `transformers.SmolVLMForConditionalGeneration` whose vision tower runs once, in input preparation.

    Each real sub-image of `pixel_values` `(batch_size, max_sub_images, C, H, W)` is one item (see
    `vlmprep.models.layouts.sub_images`).

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep.models.smolvlm import SmolVLMForConditionalGeneration
    >>> config = transformers.SmolVLMConfig(
    ...     text_config={"model_type": "llama", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1},
    ...     vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
    ...                    "num_attention_heads": 2, "image_size": 16, "patch_size": 4},
    ...     image_token_id=122,
    ... )
    >>> model = SmolVLMForConditionalGeneration(config).eval()
    >>> model.item_token_counts({})  # per sub-image: (16 / 4) ** 2 patches, pixel-shuffled by 2
    4

    ```
    """
