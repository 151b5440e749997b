"""Pixtral images (Mistral3, LightOnOCR): images of any size up to the tower's `image_size`, one grid of merged patches.

`pixel_values` is `(num_images, C, max_height, max_width)` (padded to the batch's largest) and `image_sizes`
`(num_images, 2)`; an image fills `(height // merged_patch) * (width // merged_patch)` placeholders, where
`merged_patch = patch_size * spatial_merge_size`. Mistral3's processor writes them one run per row (each row closed by
`[IMG_BREAK]`, the last by `[IMG_END]`): each row is one piece of the image's span, and a cache may end anywhere (the
model is causal), the rows after it being fed. LightOnOCR writes them as one run.
"""

from __future__ import annotations

from typing import Any

import torch

from ...generation import VisionFacts
from ...generation.hooks import FamilyHooks
from ...generation.items import default_schema
from . import Layout

__all__ = ["PixtralImagesLayout", "PixtralRowsLayout", "crop_batch_padding"]


def crop_batch_padding(model, model_kwargs: dict[str, Any], image_inputs: dict[str, Any]) -> dict[str, Any]:
    """Crop selected `(num_images, C, max_height, max_width)` pixels to the largest of the selected `image_sizes`.

    A processor pads every image to the batch's largest; Pixtral reads only each image's own `image_sizes` patches, so
    the padding changes nothing but the image's hash: without cropping, an image hashed alone in turn 1 and next to a
    larger image in turn 2 would miss both the encoder cache and the prefix cache.

    Args:
        model: the drop-in (unused: the sizes come with the images).
        model_kwargs (`dict[str, Any]`): the call's inputs (unused).
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


class PixtralImagesLayout(FamilyHooks):
    """Family hooks of Pixtral images as one placeholder run each (images only)."""

    layout = Layout("pixtral_image", "an image of any size is one run of its merged patches")

    # Images of any size up to the tower's `image_size` (its rope covers no more patches), padded to the batch's
    # largest (cropped per selection); `pooler_output` is a tuple of per-image tensors that the model concatenates.
    vision_facts = VisionFacts(
        pixel_layout="up_to_size", features_as_list=True, image_items=default_schema(unpad=crop_batch_padding)
    )

    def _merged_patch_grids(self, model_kwargs: dict[str, Any]) -> list[tuple[int, int]] | None:
        # (rows, columns) of merged patches per image, or None when the call has no `image_sizes`.
        image_sizes = model_kwargs.get("image_sizes")
        if image_sizes is None:
            return None
        merged_patch = self.config.vision_config.patch_size * self.config.spatial_merge_size
        return [(int(height) // merged_patch, int(width) // merged_patch) for height, width in image_sizes]

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list | None:
        """Placeholders per image: its grid of merged patches, `rows * columns`.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (`image_sizes`).
            modality (`str`, *optional*, defaults to `"image"`): these families have images only.

        Returns:
            `list[int]` or `None` (no `image_sizes` passed)
        """
        grids = self._merged_patch_grids(model_kwargs)
        return None if grids is None else [rows * columns for rows, columns in grids]


class PixtralRowsLayout(PixtralImagesLayout):
    """Pixtral images whose `[IMG]` placeholders come one run per row of merged patches (Mistral3)."""

    layout = Layout("pixtral_rows", "an image of any size is one run per row of merged patches, split by break tokens")

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list | None:
        """Per image, its rows of `[IMG]` placeholders: `rows` runs of `columns`.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (`image_sizes`).
            modality (`str`, *optional*, defaults to `"image"`): these families have images only.

        Returns:
            `list[list[int]]` or `None` (no `image_sizes` passed)
        """
        grids = self._merged_patch_grids(model_kwargs)
        return None if grids is None else [[columns] * rows for rows, columns in grids]
