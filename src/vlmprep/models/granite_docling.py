"""Granite Docling: a page is cut into tiles (a grid, then the global image), each tile encoded on its own, with
features also added after the first decoder layers (deepstack, one entry per layer as Qwen3-VL's).

`pixel_values` is `(batch_size, max_tiles, C, H, W)` and `pixel_attention_mask` `(batch_size, max_tiles)` marks the
real tiles. The processor writes each tile as its own run of `image_seq_len` `<image>` placeholders (behind
`<fake_token_around_image><row_i_col_j>` or `<global-img>`), four times as many when `tile_fine_mask` takes the fine
connector path. So each real tile is one item, numbered in `(sample, tile)` order, the order the model fills
placeholders in; the mixin's "image" counts and messages count tiles.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.sub_images import MaskedTilesLayout


class GraniteDoclingForConditionalGeneration(
    MaskedTilesLayout, VisionPrepMixin, transformers.GraniteDoclingForConditionalGeneration
):
    """Drop-in `transformers.GraniteDoclingForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.granite_docling import GraniteDoclingForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_granite_docling_config
    >>> model = GraniteDoclingForConditionalGeneration(tiny_granite_docling_config()).eval()
    >>> mask = torch.tensor([[True, True, True], [True, False, False]])  # 2 samples, up to 3 tiles each
    >>> inputs = {"pixel_values": torch.zeros(2, 3, 3, 16, 16), "pixel_attention_mask": mask}
    >>> model.count_items(inputs), model.item_token_counts(inputs)
    (4, 4)

    ```
    """
