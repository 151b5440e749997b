"""Aria: an image is one crop or several (`split_image`), each crop encoded on its own.

The processor writes an image as `num_crops * tokens_per_image` `<|img|>` placeholders back to back; `pixel_values`
is `(total_crops, C, H, W)` over all images with a `pixel_mask` `(total_crops, H, W)` marking each crop's padding.
A crop's features depend only on its own pixels and mask, so each crop is one item of the mechanism: one row of
`pixel_values` and `pixel_mask`, one `tokens_per_image` slice of the image's run, one encoder-cache entry. The
mixin's "image" counts and messages therefore count crops.

Crops are `max_image_size` square (490 or 980 in the released processors), which need not be the vision config's
`image_size`: the projector picks its query count from the crop's patch count (`projector_patch_to_query_dict`), so
the placeholders per crop are read off the pixels.
"""

import types
from typing import Any

import torch
import transformers

from ..generation import VisionFacts
from ..generation.validation import check_pixel_shapes
from .base import VisionPrepMixin
from .layouts.stated_counts import PROJECTOR_CROPS


class AriaForConditionalGeneration(VisionPrepMixin, transformers.AriaForConditionalGeneration):
    """Drop-in `transformers.AriaForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.aria import AriaForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_aria_config
    >>> model = AriaForConditionalGeneration(tiny_aria_config()).eval()
    >>> model.item_token_counts({"pixel_values": torch.zeros(2, 3, 16, 16)})  # per crop: (16 / 4) ** 2 patches -> 4
    4

    ```
    """

    layout = PROJECTOR_CROPS

    # Crop sizes are checked against the projector's accepted patch counts (`item_token_counts`), not `image_size`.
    vision_facts = VisionFacts(per_image_keys=("pixel_mask",), fixed_resolution=False)

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """Placeholders per crop: the projector's query count for the crop's patch count.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (the crops' pixels set the size).
            modality (`str`, *optional*, defaults to `"image"`): this family has images only.

        Returns:
            `int` or `None` (no pixels and a vision config size the projector does not take)
        """
        patch_size = self.config.vision_config.patch_size
        query_counts = self.config.projector_patch_to_query_dict
        pixel_values = model_kwargs.get("pixel_values")
        if not isinstance(pixel_values, torch.Tensor):
            # No pixels (images only in the cache): the crop size the vision config states, if the projector takes it.
            side = self.config.vision_config.image_size // patch_size
            return query_counts.get(side * side)
        # The accepted crops are square with a patch count the projector knows; any other shape gets the usual error.
        side = pixel_values.shape[-1]
        accepted = side if (side // patch_size) ** 2 in query_counts else self.config.vision_config.image_size
        vision_config = types.SimpleNamespace(num_channels=self.config.vision_config.num_channels, image_size=accepted)
        check_pixel_shapes(pixel_values, vision_config)
        return query_counts[(side // patch_size) ** 2]
