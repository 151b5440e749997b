"""LFM2-VL: SigLIP2 (NaFlex) tiles of any shape; each row of `pixel_values` (a tile or a whole image) is one item.

`pixel_values` is `(num_tiles, max_patches, C * patch * patch)` with `spatial_shapes` `(num_tiles, 2)` (patch grid)
and `pixel_attention_mask` `(num_tiles, max_patches)`; the processor writes a multi-tile image as its tiles' placeholder
runs then the thumbnail's (each behind a `<|img_row_i_col_j|>` / `<|img_thumbnail|>` tag, or back to back without
special tokens), and a single-tile image as one run. A row's features depend only on its own patches, so each row is
one item: `(rows // factor) * (columns // factor)` placeholders, split out of the runs in order. The mixin's "image"
counts and messages therefore count tiles.
"""

from typing import Any

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.stated_counts import NAFLEX_TILES


class Lfm2VlForConditionalGeneration(VisionPrepMixin, transformers.Lfm2VlForConditionalGeneration):
    """Drop-in `transformers.Lfm2VlForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.lfm2_vl import Lfm2VlForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_lfm2_vl_config
    >>> model = Lfm2VlForConditionalGeneration(tiny_lfm2_vl_config()).eval()
    >>> model.item_token_counts({"spatial_shapes": torch.tensor([[4, 4], [2, 4]])})  # patch grids, merged 2x2
    [4, 2]

    ```
    """

    layout = NAFLEX_TILES

    # NaFlex rows of flattened patches: no fixed pixel shape; `pooler_output` is a list of per-row tensors. Shapes and
    # masks are split with the rows (and hashed with them).
    vision_facts = VisionFacts(
        per_image_keys=("spatial_shapes", "pixel_attention_mask"),
        pixel_layout="patch_rows",
        features_as_list=True,
    )

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list[int] | None:
        """Placeholders per row: its patch grid merged `downsample_factor x downsample_factor`, as the model splits.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (`spatial_shapes`).
            modality (`str`, *optional*, defaults to `"image"`): this family has images only.

        Returns:
            `list[int]` or `None` (no `spatial_shapes` passed)
        """
        spatial_shapes = model_kwargs.get("spatial_shapes")
        if spatial_shapes is None:
            return None
        factor = self.config.downsample_factor
        return [(int(rows) // factor) * (int(columns) // factor) for rows, columns in spatial_shapes]
