"""Llama 4: an image is cut into fixed-resolution tiles (plus a global view), each tile one item (`layouts.tiles`).

The processor writes an image as `<|image_start|>`, then (for an image of several tiles) each tile's run of
`<|patch|>` placeholders followed by a tile separator, then `<|image|>` and the global view's run, then `<|image_end|>`
(`Llama4Processor._prompt_split_image`): every tile is one contiguous run of the same count, its patch grid
pixel-shuffled by the vision adapter (`pixel_shuffle_ratio` per side). `pixel_values` is `(total_tiles, C, H, W)`;
`pooler_output` is one `(tiles, tokens, dim)` tensor.

The decoder is causal; its chunked-attention layers use RoPE on the `position_ids` it is given, and its NoPE layers
scale queries by each token's place in the cache (`attn_temperature_tuning`), padding included, as upstream does.
"""

import transformers
from packaging.version import Version

# transformers 5.24's `Llama4ForConditionalGeneration.forward` reads `image_outputs` from the causal-LM output and
# fails on every call; 5.25 fixed it. Remove this check when 5.24 leaves the supported range.
if Version(Version(transformers.__version__).base_version) < Version("5.25"):
    raise ImportError(
        f"vlmprep's Llama4ForConditionalGeneration needs transformers>=5.25 (installed: {transformers.__version__}): "
        "the forward of the transformers class it extends fails on every call before 5.25. Upgrade transformers to "
        "load Llama 4."
    )

from ..generation import VisionFacts  # noqa: E402 (after the version check, which names what is missing)
from .base import VisionPrepMixin  # noqa: E402
from .layouts.stated_counts import TILES  # noqa: E402


def shuffled_patch_tokens(config: transformers.Llama4Config) -> int:
    """Placeholders per tile: the tile's patch grid (CLS dropped), pixel-shuffled by `pixel_shuffle_ratio` per side.

    Args:
        config (`transformers.Llama4Config`): the model config.

    Returns:
        `int`
    """
    vision_config = config.vision_config
    patches = (vision_config.image_size // vision_config.patch_size) ** 2
    # The processor's arithmetic: patches divided by `round(1 / ratio**2)` (4 for Llama 4's ratio of 0.5)
    return patches // int(round(1.0 / vision_config.pixel_shuffle_ratio**2))


class Llama4ForConditionalGeneration(VisionPrepMixin, transformers.Llama4ForConditionalGeneration):
    """Drop-in `transformers.Llama4ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.llama4 import Llama4ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_llama4_config
    >>> model = Llama4ForConditionalGeneration(tiny_llama4_config()).eval()
    >>> model.item_token_counts({})  # per tile: (16 / 4) ** 2 patches, pixel-shuffled by 0.5 per side
    4

    ```
    """

    layout = TILES

    # Tiles have the tower's fixed resolution, and the model takes no per-image input besides the tiles.
    vision_facts = VisionFacts(per_image_keys=(), tokens_per_image=shuffled_patch_tokens)

    def padding_changes_cached_kv(self) -> bool:
        """With `attn_temperature_tuning`, the NoPE layers scale queries by the place in the cache, padding included:
        a padded row's KV is not the unpadded row's (`FamilyHooks.padding_changes_cached_kv`).

        Returns:
            `bool`
        """
        return bool(getattr(self.config.get_text_config(decoder=True), "attn_temperature_tuning", False))
