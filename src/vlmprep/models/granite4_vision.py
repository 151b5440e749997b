"""Granite 4 Vision: LLaVA-NeXT's any-res crops, with features summed in at several decoder layers (deepstack).

`get_image_features` returns no `pooler_output`: only `deepstack_features`, `(decoder layer, per-image features)`
pairs, one per layerwise projector (`deepstack_layer_map`) and one per spatial projector (`spatial_target_layers`).
The model zeroes the placeholders' embeddings and adds each pair's rows at its layer, so every pair's rows follow the
placeholders chunk by chunk, in the same pairs. Each crop is downsampled by the window Q-Former
(`downsample_rate`), so an image's placeholder count is upstream's packing of downsampled crops.
"""

from dataclasses import replace
from fractions import Fraction
from typing import Any

import torch
import transformers
from transformers import PreTrainedConfig

from .base import VisionPrepMixin
from .layouts.anyres import AnyresCropsLayout, dummy_crop_features


def deepstack_decoder_layers(config: PreTrainedConfig) -> tuple[int, ...]:
    """The decoder layer of each deepstack pair, in the order `get_image_features` returns them: the layerwise
    projectors' (`deepstack_layer_map`), then the spatial projectors' (`spatial_target_layers`)."""
    return (*(layer for _, layer in config.deepstack_layer_map), *config.spatial_target_layers)


class Granite4VisionForConditionalGeneration(
    AnyresCropsLayout, VisionPrepMixin, transformers.Granite4VisionForConditionalGeneration
):
    """Drop-in `transformers.Granite4VisionForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.granite4_vision import Granite4VisionForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_granite4_vision_config
    >>> model = Granite4VisionForConditionalGeneration(tiny_granite4_vision_config()).eval()
    >>> model.item_token_counts({"image_sizes": torch.tensor([[8, 13], [13, 8]])})
    [14, 16]

    ```
    """

    # LLaVA-NeXT's crops; the features are the deepstack pairs only (the first pair's rows stand for them).
    vision_facts = replace(
        AnyresCropsLayout.vision_facts, features_key=None, deepstack_targets=deepstack_decoder_layers
    )

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list[int] | None:
        """Placeholders per image: the rows upstream's `pack_image_features` makes of its downsampled crops.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (`image_sizes`, the feature select strategy).
            modality (`str`, *optional*, defaults to `"image"`): the family has images only.

        Returns:
            `list[int]` or `None` (no `image_sizes` passed)
        """
        image_sizes = model_kwargs.get("image_sizes")
        if image_sizes is None:
            return None
        strategy = model_kwargs.get("vision_feature_select_strategy") or self.config.vision_feature_select_strategy
        vision = self.config.vision_config
        # The window Q-Former keeps `downsample_rate` of each side of a crop's patch grid
        side = int(vision.image_size // vision.patch_size * Fraction(self.config.downsample_rate))
        dummies = [dummy_crop_features(self.config, size, side * side) for size in image_sizes]
        packed = self.model.pack_image_features(
            dummies, image_sizes, vision_feature_select_strategy=strategy, image_newline=torch.zeros(1)
        )
        return [int(features.shape[0]) for features in packed]
