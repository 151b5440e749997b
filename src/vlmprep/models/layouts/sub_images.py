"""Sub-images (Idefics3, SmolVLM; Granite Docling's masked tiles): an image is split into sub-images (a grid of
crops plus the global image).

`pixel_values` is `(batch_size, max_sub_images, C, H, W)`: each sample's sub-images, padded with all-zero sub-images
that the model drops; `pixel_attention_mask` `(batch_size, max_sub_images, H, W)` marks the real pixels. The
processor writes each sub-image as its own run of `image_seq_len` placeholders, and a sub-image's features depend only
on its own pixels and mask. So each real sub-image is one item of the mechanism, numbered in `(sample, sub-image)`
order, which is the order the model fills placeholders in; the mixin's "image" counts and messages count sub-images.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedConfig

from ...generation import VisionFacts
from ...generation.hooks import FamilyHooks
from ...generation.validation import check_companion_input
from . import Layout
from .vision_patches import vision_patch_count

__all__ = [
    "MaskedTilesLayout",
    "SubImagesLayout",
    "real_sub_images",
    "select_sub_images",
    "sub_image_tokens",
    "tile_tokens",
]


def sub_image_tokens(config: PreTrainedConfig) -> int:
    """`image_seq_len` of the Idefics3/SmolVLM processors: `(image_size // patch_size) ** 2 // scale_factor ** 2`."""
    return vision_patch_count(config) // config.scale_factor**2


class SubImagesLayout(FamilyHooks):
    """Family hooks of the sub-image layout: each real sub-image of `pixel_values` is one item (images only)."""

    layout = Layout("sub_images", "each real sub-image of `(batch, sub_images, C, H, W)` pixels is one item")

    # 5D pixels, every sub-image at the tower's `image_size`; the mask is split with the sub-images. Every sub-image
    # has the processor's `image_seq_len` placeholders.
    vision_facts = VisionFacts(
        per_image_keys=("pixel_attention_mask",),
        pixel_layout="sub_images",
        tokens_per_image=sub_image_tokens,
    )

    def count_items(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """Real (not all-zero padding) sub-images of all samples.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): these families have images only.

        Returns:
            `int` or `None` (no pixels passed)
        """
        pixel_values = model_kwargs.get("pixel_values")
        return None if pixel_values is None else int(real_sub_images(pixel_values).sum())

    def select_item_inputs(
        self, model_kwargs: dict[str, Any], indices: list[int], modality: str = "image"
    ) -> dict[str, Any]:
        """The given real sub-images as one sample `(1, len(indices), ...)`, with their pixel masks.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            indices (`list[int]`): indices among the real sub-images.
            modality (`str`, *optional*, defaults to `"image"`): these families have images only.

        Returns:
            `dict[str, Any]`
        """
        return select_sub_images(model_kwargs, indices)


def real_sub_images(pixel_values: torch.Tensor) -> torch.Tensor:
    """`(batch_size, max_sub_images)` mask of the sub-images that are not all-zero padding, as the model decides."""
    return pixel_values.flatten(2).ne(0).any(dim=-1)


def select_sub_images(model_kwargs: dict[str, Any], indices: list[int]) -> dict[str, Any]:
    """`pixel_values` (and `pixel_attention_mask`) of the given real sub-images, as one sample.

    Args:
        model_kwargs (`dict[str, Any]`): the call's inputs.
        indices (`list[int]`): indices among the real sub-images, in `(sample, sub-image)` order.

    Returns:
        `dict[str, Any]`: `pixel_values` `(1, len(indices), C, H, W)`, `pixel_attention_mask` `(1, len(indices), H, W)`.
    """
    pixel_values = model_kwargs["pixel_values"]
    real = real_sub_images(pixel_values).flatten()  # (batch_size * max_sub_images,)
    selected = {"pixel_values": pixel_values.flatten(0, 1)[real][indices].unsqueeze(0)}
    mask = model_kwargs.get("pixel_attention_mask")
    if mask is not None:
        selected["pixel_attention_mask"] = mask.flatten(0, 1)[real][indices].unsqueeze(0)
    return selected


def tile_tokens(config: PreTrainedConfig) -> int:
    """Placeholders of one tile on Granite Docling's coarse connector path: `(image_size // patch_size) ** 2 //
    vision_config.scale_factor ** 2` (the processor's `image_seq_len`)."""
    return vision_patch_count(config) // config.vision_config.scale_factor**2


class MaskedTilesLayout(SubImagesLayout):
    """Family hooks of tiles marked real by a per-tile mask (Granite Docling): each real tile is one item.

    `pixel_values` is `(batch_size, max_tiles, C, H, W)` and `pixel_attention_mask` `(batch_size, max_tiles)` marks the
    real tiles (padding tiles are not all-zero pixels here). The processor writes each tile as its own run (behind
    `<row_i_col_j>`, then the global image), and a tile's features depend only on its own pixels and on the connector
    path: `tile_fine_mask` (given for the whole batch) takes the fine path, four times the placeholders per tile.
    """

    layout = Layout(
        "masked_tiles",
        "each tile of `(batch, tiles, C, H, W)` pixels marked real by a `(batch, tiles)` mask is one item",
    )

    vision_facts = VisionFacts(
        per_image_keys=("pixel_attention_mask", "tile_fine_mask"),
        pixel_layout="sub_images",
        features_as_list=True,
    )

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int:
        """Placeholders per tile: `image_seq_len`, four times as many on the fine path (`tile_fine_mask` given).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): these families have images only.

        Returns:
            `int`
        """
        # The model takes the fine path whenever the mask is passed, whatever its values
        return tile_tokens(self.config) * (4 if model_kwargs.get("tile_fine_mask") is not None else 1)

    def count_items(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """Real tiles of all samples (`pixel_attention_mask`).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): these families have images only.

        Returns:
            `int` or `None` (no pixels passed)
        """
        if model_kwargs.get("pixel_values") is None:
            return None
        return int(_real_tiles(model_kwargs).sum())

    def select_item_inputs(
        self, model_kwargs: dict[str, Any], indices: list[int], modality: str = "image"
    ) -> dict[str, Any]:
        """The given real tiles as one sample `(1, len(indices), ...)`, with their mask (and the fine path flag).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            indices (`list[int]`): indices among the real tiles, in `(sample, tile)` order.
            modality (`str`, *optional*, defaults to `"image"`): these families have images only.

        Returns:
            `dict[str, Any]`
        """
        real = _real_tiles(model_kwargs).flatten()  # (batch_size * max_tiles,)
        pixel_values = model_kwargs["pixel_values"].flatten(0, 1)[real][indices].unsqueeze(0)
        selected = {"pixel_values": pixel_values, "pixel_attention_mask": real.new_ones(1, len(indices))}
        if model_kwargs.get("tile_fine_mask") is not None:
            selected["tile_fine_mask"] = real.new_ones(1)  # one sample, on the fine path as the whole batch
        return selected


def _real_tiles(model_kwargs: dict[str, Any]) -> torch.Tensor:
    # `(batch_size, max_tiles)`: the mask the model reads, or every tile when none is passed
    mask = model_kwargs.get("pixel_attention_mask")
    pixel_values = model_kwargs["pixel_values"]
    if mask is None:
        raise ValueError(
            "`pixel_attention_mask` `(batch_size, tiles)` is needed with `pixel_values`: it marks the real tiles. "
            "Pass the processor's output as it is."
        )
    check_companion_input(mask, "pixel_attention_mask", pixel_values.shape[:2], "pixel_values", "one flag per tile")
    return mask.to(torch.bool)
