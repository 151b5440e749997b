"""Pixel-shuffled tiles (Aya Vision, Cohere2 Vision): each fixed-resolution tile of an image is one item.

`pixel_values` is `(total_tiles, C, H, W)` over all images, without the tiles-per-image count; a tile's features
depend only on its own pixels, so each tile is one item: one row of `pixel_values`, one placeholder run, one entry of
the encoder cache. The mixin's "image" counts and messages therefore count tiles.
"""

from __future__ import annotations

from transformers import PreTrainedConfig

from ...generation import VisionFacts
from ...generation.hooks import FamilyHooks

__all__ = ["PixelShuffledTilesLayout", "pixel_shuffled_tile_tokens"]


def pixel_shuffled_tile_tokens(config: PreTrainedConfig) -> int:
    """Placeholders per tile: the tile's patch grid, pixel-shuffled by `config.downsample_factor` in each direction."""
    vision_config = config.vision_config
    side = vision_config.image_size // vision_config.patch_size // config.downsample_factor
    return side * side


class PixelShuffledTilesLayout(FamilyHooks):
    """Family hooks of tiles pixel-shuffled by `downsample_factor` (images only): the mixin's, with these facts."""

    # Tiles have the tower's fixed resolution; `pooler_output` is one `(tiles, tokens, dim)` tensor.
    vision_facts = VisionFacts(per_image_keys=(), tokens_per_image=pixel_shuffled_tile_tokens)
