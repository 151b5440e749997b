"""Pixel-shuffled tiles (Aya Vision, Cohere2 Vision): each fixed-resolution tile of an image is one item.

`pixel_values` is `(total_tiles, C, H, W)` over all images, without the tiles-per-image count; a tile's features
depend only on its own pixels, so each tile is one item: one row of `pixel_values`, one placeholder run, one entry of
the encoder cache. The mixin's "image" counts and messages therefore count tiles.
"""

from __future__ import annotations

from typing import Any

from ...generation import VisionFacts
from ...generation.hooks import FamilyHooks

__all__ = ["PixelShuffledTilesLayout"]


class PixelShuffledTilesLayout(FamilyHooks):
    """Family hooks of tiles pixel-shuffled by `downsample_factor` (images only)."""

    # Tiles have the tower's fixed resolution; `pooler_output` is one `(tiles, tokens, dim)` tensor.
    vision_facts = VisionFacts(per_image_keys=())

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int:
        """Placeholders per tile: the tile's patch grid, pixel-shuffled by `downsample_factor` in each direction.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (unused: every tile has the same count).
            modality (`str`, *optional*, defaults to `"image"`): these families have images only.

        Returns:
            `int`
        """
        vision_config = self.config.vision_config
        side = vision_config.image_size // vision_config.patch_size // self.config.downsample_factor
        return side * side
