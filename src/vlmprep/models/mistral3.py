"""Mistral3 (Pixtral vision): any image size; an image's `[IMG]` placeholders come one run per row of merged patches.

The processor lays an image out as rows of `[IMG] * width` each closed by `[IMG_BREAK]` (the last by `[IMG_END]`);
the features fill the `[IMG]` tokens only, row by row. Each row is one piece of the image's span: a cache may end
anywhere (the model is causal) and the rows after it are fed.
"""

from typing import Any

import torch
import transformers

from ..generation import VisionFacts, VisionPrepGenerationMixin


class Mistral3ForConditionalGeneration(VisionPrepGenerationMixin, transformers.Mistral3ForConditionalGeneration):
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
    >>> model.image_token_counts({"image_sizes": torch.tensor([[8, 12]])})  # 2 rows of 3 `[IMG]`
    [[3, 3]]

    ```
    """

    # Images of any size up to the tower's `image_size` (its rope covers no more patches); `pooler_output` is a tuple of
    # per-image tensors that the model concatenates.
    vision_facts = VisionFacts(fixed_resolution=False, pixel_layout="up_to_size", features_as_list=True)

    def image_token_counts(self, model_kwargs: dict[str, Any]) -> list[list[int]] | None:
        """Per image, its rows of `[IMG]` placeholders: `height // merged_patch` rows of `width // merged_patch`."""
        image_sizes = model_kwargs.get("image_sizes")
        if image_sizes is None:
            return None
        merged_patch = self.config.vision_config.patch_size * self.config.spatial_merge_size
        return [[int(width) // merged_patch] * (int(height) // merged_patch) for height, width in image_sizes]

    def select_image_inputs(self, model_kwargs: dict[str, Any], indices: list[int]) -> dict[str, Any]:
        """The images' pixels and sizes, without the padding a batch added (so hashes do not depend on it)."""
        return crop_batch_padding(super().select_image_inputs(model_kwargs, indices))


def crop_batch_padding(image_inputs: dict[str, Any]) -> dict[str, Any]:
    """Crop selected `(num_images, C, max_height, max_width)` pixels to the largest of the selected `image_sizes`.

    A processor pads every image to the batch's largest; Pixtral reads only each image's own `image_sizes` patches, so
    the padding changes nothing but the image's hash: without cropping, an image hashed alone in turn 1 and next to a
    larger image in turn 2 would miss both the encoder cache and the prefix cache.

    Args:
        image_inputs (`dict[str, Any]`): the selected `pixel_values` and `image_sizes`.

    Returns:
        `dict[str, Any]`
    """
    pixel_values, image_sizes = image_inputs.get("pixel_values"), image_inputs.get("image_sizes")
    if not isinstance(pixel_values, torch.Tensor) or pixel_values.ndim != 4 or image_sizes is None:
        return image_inputs
    height = max(int(size[0]) for size in image_sizes)
    width = max(int(size[1]) for size in image_sizes)
    return {**image_inputs, "pixel_values": pixel_values[..., :height, :width]}  # (images, C, height, width)
