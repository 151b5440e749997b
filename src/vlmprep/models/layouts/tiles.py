"""Tiles: each fixed-resolution tile (or crop) of an image is one item, with a fixed count of placeholders.

`pixel_values` is `(total_tiles, C, H, W)` over all images, without the tiles-per-image count; a tile's features
depend only on its own pixels, so each tile is one item: one row of `pixel_values`, one placeholder run (or one slice
of the image's run, when the processor writes the tiles back to back), one entry of the encoder cache. The mixin's
"image" counts and messages therefore count tiles. The count per tile is a fact (`VisionFacts.tokens_per_image_attr`
or `tokens_per_image`): InternVL and Qianfan-OCR read it from the config, GOT-OCR2 computes it, and the pixel-shuffled
tiles of Aya Vision and Cohere2 Vision state `PIXEL_SHUFFLED_TILES` and its facts.
"""

from __future__ import annotations

from transformers import PreTrainedConfig

from ...generation import VisionFacts
from . import Layout

__all__ = ["PIXEL_SHUFFLED_TILES", "PIXEL_SHUFFLED_TILES_FACTS", "pixel_shuffled_tile_tokens"]


def pixel_shuffled_tile_tokens(config: PreTrainedConfig) -> int:
    """Placeholders per tile: the tile's patch grid, pixel-shuffled by `config.downsample_factor` in each direction."""
    vision_config = config.vision_config
    side = vision_config.image_size // vision_config.patch_size // config.downsample_factor
    return side * side


# Tiles pixel-shuffled by `downsample_factor` (images only): the mixin's hooks, with these facts. Tiles have the
# tower's fixed resolution; `pooler_output` is one `(tiles, tokens, dim)` tensor.
PIXEL_SHUFFLED_TILES = Layout(
    "pixel_shuffled_tiles", "each tile of an image is one item, its patch grid pixel-shuffled"
)
PIXEL_SHUFFLED_TILES_FACTS = VisionFacts(per_image_keys=(), tokens_per_image=pixel_shuffled_tile_tokens)
