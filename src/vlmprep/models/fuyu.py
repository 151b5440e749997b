"""Fuyu: no vision tower; one linear layer embeds each flattened image patch, and each patch fills one placeholder.

The processor cuts an image into `patch_size` patches, flattens them into `pixel_values` `(patches, C * p * p)`
(every image's patches back to back, in prompt order) and writes the image as one row of `|SPEAKER|` placeholders per
row of patches, each row ended by `|NEWLINE|`. `get_image_features` returns the embedded patches as
`last_hidden_state`. Since a patch's embedding depends on that patch alone, each patch is an item of the mechanism:
one placeholder, encoded (one matrix product) once, cached and hashed on its own, wherever a chunk or a cache cuts an
image. Positions are 1D and attention causal.
"""

from typing import Any

import torch
import transformers

from ..generation import VisionFacts
from ..generation.items import ItemSchema, batched
from .base import VisionPrepMixin
from .layouts.patch_items_and_audio import check_one_patch_per_placeholder
from .layouts.stated_counts import LINEAR_PATCHES


def one_placeholder_per_patch(config: transformers.FuyuConfig) -> int:
    """Placeholders per item (a patch): one."""
    return 1


class FuyuForCausalLM(VisionPrepMixin, transformers.FuyuForCausalLM):
    """Drop-in `transformers.FuyuForCausalLM` whose patch embedding runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.fuyu import FuyuForCausalLM
    >>> from vlmprep.testing.configs import tiny_fuyu_config
    >>> model = FuyuForCausalLM(tiny_fuyu_config()).eval()
    >>> model.count_items({"pixel_values": torch.zeros(24, 48)}), model.item_token_counts({})  # a patch each
    (24, 1)

    ```
    """

    layout = LINEAR_PATCHES

    # One placeholder per patch; the features are the output's `last_hidden_state`.
    vision_facts = VisionFacts(
        per_image_keys=(),
        pixel_layout=None,
        tokens_per_image=one_placeholder_per_patch,
        features_key="last_hidden_state",
        # Every axis of `pixel_values` but the last counts patches: `(patches, dim)` or `(batch, patches, dim)`.
        image_items=ItemSchema((batched("pixel_values", flatten=True),)),
    )

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise a clear `ValueError` unless every patch of `pixel_values` has `num_channels * patch_size ** 2` values.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): Fuyu has images only.
        """
        pixel_values = model_kwargs.get("pixel_values")
        width = self.config.num_channels * self.config.patch_size**2
        if isinstance(pixel_values, torch.Tensor) and (
            pixel_values.ndim not in (2, 3) or pixel_values.shape[-1] != width
        ):
            raise ValueError(
                f"`pixel_values` has shape {tuple(pixel_values.shape)} but this model's vision tower takes flattened "
                f"patches (patches, {width}). Preprocess the images with this model's processor."
            )

    def check_item_count(self, model_kwargs: dict[str, Any], spans: list, modality: str = "image") -> None:
        """Raise a clear `ValueError` unless `pixel_values` holds one patch per image placeholder of the prompt.

        An item here is one patch, so the generic count ("images" per "placeholder run") would count patches as
        images; this says what the user passed: patches of images, one per `|SPEAKER|` placeholder.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (with `pixel_values`).
            spans (`list[ItemSpan]`): the prompt's spans, one per placeholder.
            modality (`str`, *optional*, defaults to `"image"`): Fuyu has images only.
        """
        placement = "one per patch, each row of an image's patches ended by a newline token"
        check_one_patch_per_placeholder(self, model_kwargs, spans, placement)
