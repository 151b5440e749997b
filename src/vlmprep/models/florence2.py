"""Florence-2: an encoder-decoder (BART) whose image features fill a run of placeholders in the encoder's prompt.

The DaViT tower and projector give one feature per cell of the last stage's grid plus one pooled feature, so an
image's placeholder count follows its pixel size through the stages' convolutions (the processor resizes every image
to one size). The encoder's prompt is encoded once per call, its images from the encoder cache
(`vlmprep.generation.encoder_prompt`); the decoder is transformers'.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.stated_counts import ENCODER_PROMPT_IMAGE


def _conv_output_side(side: int, kernel: int, stride: int, padding: int) -> int:
    return (side + 2 * padding - kernel) // stride + 1


class Florence2ForConditionalGeneration(VisionPrepMixin, transformers.Florence2ForConditionalGeneration):
    """Drop-in `transformers.Florence2ForConditionalGeneration` whose vision tower runs once per distinct image, in
    input preparation: several task prompts on one image encode it once.

    Example:

    ```python
    >>> from vlmprep.models.florence2 import Florence2ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_florence2_config
    >>> model = Florence2ForConditionalGeneration(tiny_florence2_config()).eval()
    >>> import torch
    >>> model.item_token_counts({"pixel_values": torch.zeros(1, 3, 16, 16)})  # a 2x2 grid and the pooled feature
    5

    ```
    """

    layout = ENCODER_PROMPT_IMAGE
    # The tower takes any image size (the processor resizes to one): the count follows the pixels, not the config
    vision_facts = VisionFacts(fixed_resolution=False)

    def _last_grid(self, pixel_values: torch.Tensor) -> tuple[int, int]:
        # The last stage's grid: each stage is a strided convolution of the previous one's
        vision = self.config.vision_config
        height, width = pixel_values.shape[-2:]
        for kernel, stride, padding in zip(vision.patch_size, vision.patch_stride, vision.patch_padding, strict=True):
            height = _conv_output_side(height, kernel, stride, padding)
            width = _conv_output_side(width, kernel, stride, padding)
        return height, width

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        # One feature per cell of the last stage's grid, and the pooled (temporal) one the projector appends
        pixel_values = model_kwargs.get("pixel_values")
        if modality != "image" or not isinstance(pixel_values, torch.Tensor) or pixel_values.ndim != 4:
            return None
        height, width = self._last_grid(pixel_values)
        return height * width + 1

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        pixel_values = model_kwargs.get("pixel_values")
        if modality != "image" or not isinstance(pixel_values, torch.Tensor):
            return
        vision = self.config.vision_config
        if pixel_values.ndim != 4 or pixel_values.shape[1] != vision.in_channels:
            raise ValueError(
                f"`pixel_values` has shape {tuple(pixel_values.shape)} but Florence-2's vision tower takes "
                f"(num_images, {vision.in_channels}, height, width). Preprocess the images with this model's image "
                "processor (it resizes and normalizes them)."
            )
        grid = self._last_grid(pixel_values)
        if min(grid) < 1 or max(grid) > vision.max_position_embeddings:
            raise ValueError(
                f"`pixel_values` of {tuple(pixel_values.shape[-2:])} pixels give a {grid} grid, which the vision "
                f"tower's position table ({vision.max_position_embeddings} per side) does not cover. Preprocess the "
                "images with this model's image processor (it resizes them to the size the checkpoint takes)."
            )
