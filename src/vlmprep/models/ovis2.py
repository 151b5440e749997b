"""Ovis2: an image is a global crop, then (for a tiled image) a grid of crops, each crop its own run of placeholders.

`pixel_values` is `(num_crops, C, H, W)`, every crop at the tower's `image_size`, the crops of each image in prompt
order. The processor writes an image as `<IMG_START>`, the global crop's run, `<IMG_GRID>`, then the tiles' runs
split by `<IMG_COL>`/`<IMG_ROW>`, and `<IMG_END>`; a crop's features depend only on its own pixels, so each crop is
one item (the mixin's "image" counts and messages count crops). The indicator tokens (`visual_indicator_token_ids`)
get embeddings of the visual embedding table, not their text embeddings, in every forward that feeds images: every
prefill forward of a prompt holding images feeds them, with or without a placeholder in its slice.
"""

from typing import Any

import torch
import transformers
from transformers import PreTrainedConfig

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.stated_counts import FIXED_IMAGE
from .layouts.vision_patches import vision_patch_count


def crop_tokens(config: PreTrainedConfig) -> int:
    """Placeholders of one crop: the tower's patches, grouped `hidden_stride x hidden_stride` (the processor's
    `image_seq_length`)."""
    return vision_patch_count(config) // config.vision_config.hidden_stride**2


class Ovis2ForConditionalGeneration(VisionPrepMixin, transformers.Ovis2ForConditionalGeneration):
    """Drop-in `transformers.Ovis2ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.ovis2 import Ovis2ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_ovis2_config
    >>> model = Ovis2ForConditionalGeneration(tiny_ovis2_config()).eval()
    >>> model.item_token_counts({}), sorted(model.item_independent_encoder_fields())
    (4, ['visual_indicator_features'])

    ```
    """

    layout = FIXED_IMAGE

    # Fixed-size crops, one per item, with no per-crop extras (the grids only build the prompt)
    vision_facts = VisionFacts(per_image_keys=(), tokens_per_image=crop_tokens)

    def item_independent_encoder_fields(self, modality: str = "image") -> dict[str, Any]:
        """The indicator tokens' embeddings, which `get_image_features` returns with every image: the last
        `num_visual_indicator_tokens` rows of the visual embedding table.

        Args:
            modality (`str`, *optional*, defaults to `"image"`): the family has images only.

        Returns:
            `dict[str, Any]`: `{"visual_indicator_features": (num_indicators, hidden_size)}`.
        """
        table = self.model.visual_embeddings_table
        indicators = self.config.vision_config.num_visual_indicator_tokens
        ids = torch.arange(table.num_embeddings - indicators, table.num_embeddings, device=table.weight.device)
        return {"visual_indicator_features": table(ids)}
