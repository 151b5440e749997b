"""LightOnOCR: Pixtral vision at any image size; an image is one run of `rows * columns` placeholders (no breaks)."""

from typing import Any

import transformers

from ..generation import VisionFacts, VisionPrepGenerationMixin
from .mistral3 import crop_batch_padding


class LightOnOcrForConditionalGeneration(VisionPrepGenerationMixin, transformers.LightOnOcrForConditionalGeneration):
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
    >>> model.image_token_counts({"image_sizes": torch.tensor([[8, 12]])})  # 2 x 3 merged patches
    [6]

    ```
    """

    # Images of any size up to the tower's `image_size` (its rope covers no more patches); `pooler_output` is a tuple of
    # per-image tensors that the model concatenates.
    vision_facts = VisionFacts(fixed_resolution=False, pixel_layout="up_to_size", features_as_list=True)

    def image_token_counts(self, model_kwargs: dict[str, Any]) -> list[int] | None:
        """Placeholders per image: its grid of merged patches, `(height // merged_patch) * (width // merged_patch)`."""
        image_sizes = model_kwargs.get("image_sizes")
        if image_sizes is None:
            return None
        merged_patch = self.config.vision_config.patch_size * self.config.spatial_merge_size
        return [(int(height) // merged_patch) * (int(width) // merged_patch) for height, width in image_sizes]

    def select_image_inputs(self, model_kwargs: dict[str, Any], indices: list[int]) -> dict[str, Any]:
        """The images' pixels and sizes, without the padding a batch added (so hashes do not depend on it)."""
        return crop_batch_padding(super().select_image_inputs(model_kwargs, indices))
