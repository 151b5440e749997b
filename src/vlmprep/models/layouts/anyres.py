"""Any-res crops (LLaVA-NeXT and the families built like it): an image is a base crop plus a grid of crops.

`pixel_values` is `(num_images, crops, C, H, W)`, every crop at the tower's `image_size`, padded to the batch's largest
crop count; `image_sizes` `(num_images, 2)` holds each image's original size. An image's placeholder count follows from
its size, the grid pinpoints and the unpadding: upstream's own `pack_image_features` is run on stand-in features to
count it, rather than re-deriving its arithmetic.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedConfig
from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

from ...generation import VisionFacts
from ...generation.hooks import FamilyHooks
from ...generation.items import default_schema
from . import Layout
from .vision_patches import vision_patch_count

__all__ = ["AnyresCropsLayout", "dummy_crop_features", "tokens_per_crop", "trim_padding_crops"]


def trim_padding_crops(
    config: PreTrainedConfig, image_inputs: dict[str, Any], with_grid: list[bool] | None = None
) -> dict[str, Any]:
    """Drop the trailing all-padding crops of a `(num_images, max_crops, C, H, W)` selection of images.

    A processor pads every image's crops to the batch's largest count; the model reads only an image's own crops, so
    the padding only makes one image's inputs (and hash) depend on the other images it was batched with.

    Args:
        config (`PreTrainedConfig`): the model config.
        image_inputs (`dict[str, Any]`): the selected `pixel_values` and `image_sizes`.
        with_grid (`list[bool]`, *optional*): per selected image, whether it uses its grid crops (default: all do).

    Returns:
        `dict[str, Any]`
    """
    pixel_values, image_sizes = image_inputs.get("pixel_values"), image_inputs.get("image_sizes")
    if not isinstance(pixel_values, torch.Tensor) or pixel_values.ndim != 5 or image_sizes is None:
        return image_inputs
    with_grid = with_grid if with_grid is not None else [True] * len(image_sizes)
    crops = [
        image_size_to_num_patches(size, config.image_grid_pinpoints, config.vision_config.image_size) if grid else 1
        for size, grid in zip(image_sizes, with_grid, strict=True)
    ]
    return {**image_inputs, "pixel_values": pixel_values[:, : max(crops)]}  # (images, crops, C, H, W)


def _trim_selected_crops(model, model_kwargs: dict[str, Any], selected: dict[str, Any]) -> dict[str, Any]:
    return trim_padding_crops(model.config, selected)


class AnyresCropsLayout(FamilyHooks):
    """Family hooks of any-res images (LLaVA-NeXT, LLaVA-NeXT-Video); other modalities get the mixin's defaults."""

    layout = Layout(
        "anyres_crops", "an image is a base crop and a grid of crops, placeholders from upstream's packing"
    )

    # `pixel_values` has a crop dimension, `(num_images, crops, C, H, W)`, every crop at `image_size`, padded to the
    # batch's largest count (trimmed per selection); the model concatenates `pooler_output`, a list of per-image
    # tensors (base crop, unpadded grid, newlines).
    vision_facts = VisionFacts(
        pixel_layout="crops", features_as_list=True, image_items=default_schema(unpad=_trim_selected_crops)
    )

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list[int] | None:
        """Placeholders per image: the rows upstream's own `pack_image_features` makes from its `image_sizes`.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (`image_sizes`, the feature select strategy).
            modality (`str`, *optional*, defaults to `"image"`): another modality gets the mixin's default.

        Returns:
            `list[int]` or `None` (no `image_sizes` passed)
        """
        if modality != "image":
            return super().item_token_counts(model_kwargs, modality)
        image_sizes = model_kwargs.get("image_sizes")
        if image_sizes is None:
            return None
        strategy = model_kwargs.get("vision_feature_select_strategy") or self.config.vision_feature_select_strategy
        crop_rows = tokens_per_crop(self.model, strategy)
        dummies = [dummy_crop_features(self.config, size, crop_rows) for size in image_sizes]
        packed, _ = self.model.pack_image_features(
            dummies, image_sizes, vision_feature_select_strategy=strategy, image_newline=torch.zeros(1)
        )
        return [int(features.shape[0]) for features in packed]


def tokens_per_crop(model: torch.nn.Module, strategy: str | None) -> int:
    """Feature rows of one crop: the tokens the vision tower emits (CLIP's include CLS), less CLS for `"default"`.

    Args:
        model (`torch.nn.Module`): the inner model (`model.model`), with its `vision_tower`.
        strategy (`str`, *optional*): the vision feature select strategy (`"default"` drops the first token).

    Returns:
        `int`
    """
    patches = vision_patch_count(model.config)
    emitted = getattr(getattr(model.vision_tower, "embeddings", None), "num_positions", patches)
    return emitted - (1 if strategy == "default" else 0)


def dummy_crop_features(
    config: PreTrainedConfig, image_size: torch.Tensor, crop_rows: int, with_grid: bool = True
) -> torch.Tensor:
    """1-channel stand-in for one image's projected crop features, to count what `pack_image_features` keeps.

    Running upstream's packing itself on it (rather than re-deriving its unpadding arithmetic) keeps the count exact,
    whatever the family's packing does (LLaVA-NeXT unpads the grid; LLaVA-OneVision also downsamples big grids).

    Args:
        config (`PreTrainedConfig`): the model config (grid pinpoints, vision image size).
        image_size (`torch.Tensor`): the image's original `(height, width)`.
        crop_rows (`int`): feature rows of one crop (`tokens_per_crop`).
        with_grid (`bool`, *optional*, defaults to `True`): whether the image gets its anyres grid, or only the base crop.

    Returns:
        `torch.Tensor` of shape `(num_crops, crop_rows, 1)`
    """
    crops = image_size_to_num_patches(image_size, config.image_grid_pinpoints, config.vision_config.image_size)
    return torch.zeros(crops if with_grid else 1, crop_rows, 1)
