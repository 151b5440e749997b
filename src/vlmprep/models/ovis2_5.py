"""Ovis2.5: Qwen2-VL-like patch grids whose runs sit between start and end tokens embedded by the vision side.

Images and videos come as Qwen2-VL's do (`pixel_values` rows with one `image_grid_thw` row per image; videos in
`pixel_values_videos` with `video_grid_thw`), each item one run of `t * h * w / spatial_merge_size**2` placeholders
between its start and end tokens (`Ovis2_5Processor.replace_image_token`/`replace_video_token`). The start and end
tokens get learned indicator embeddings of the visual embedding table instead of their text embeddings, but only in a
forward that feeds that item's features, and upstream checks that such a forward holds as many start and as many end
tokens as items fed (one tensor per item in `pooler_output`: `features_per_item`): an item's start-to-end tokens are
fed whole in one forward (`whole_item_blocks`), so chunks and resume points fall only outside them. Attention is causal; `generate` drops `position_ids`, so the decoder numbers
tokens by their place in the cache (as EXAONE 4.5's).
"""

from dataclasses import replace

import transformers

if not hasattr(transformers, "Ovis2_5ForConditionalGeneration"):  # added by transformers 5.25
    raise ImportError(
        f"vlmprep's Ovis2_5ForConditionalGeneration needs transformers>=5.25 (installed: {transformers.__version__}), "
        "whose class it extends: upgrade transformers to load Ovis2.5."
    )

from ..generation.spans import Block  # noqa: E402 (after the version check, which names what is missing)
from .base import VisionPrepMixin  # noqa: E402
from .layouts.patch_grid import (  # noqa: E402
    PATCH_GRID_CACHE_POSITIONS_FACTS,
    PatchGridLayout,
    PatchGridVisionNames,
)


class Ovis2_5ForConditionalGeneration(PatchGridLayout, VisionPrepMixin, transformers.Ovis2_5ForConditionalGeneration):
    """Drop-in `transformers.Ovis2_5ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.generation.spans import ItemSpan
    >>> from vlmprep.models.ovis2_5 import Ovis2_5ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_ovis2_5_config
    >>> model = Ovis2_5ForConditionalGeneration(tiny_ovis2_5_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]
    >>> model.whole_item_blocks([ItemSpan(row=0, start=3, end=7, item_index=0)])  # start token at 2, end token at 7
    [Block(row=0, start=2, end=8)]

    ```
    """

    multimodal_positions = False

    # Upstream counts the items of a forward by its list of features: one tensor per item run, not one per forward
    vision_facts = replace(PATCH_GRID_CACHE_POSITIONS_FACTS, features_per_item=True)
    # Ovis2.5's tower names its channels `num_channels` (Qwen2-VL's `in_channels`)
    vision_config_names = PatchGridVisionNames(channels="num_channels")

    def whole_item_blocks(self, spans: list) -> list[Block]:
        """Each item's run with its start token before and its end token after it: one forward holds it whole.

        Args:
            spans (`list[ItemSpan]`): the prompt's item spans (one run per item).

        Returns:
            `list[Block]`
        """
        # The vocabulary of the layouts lacks "a run's neighbours belong to the item": the blocks say it here.
        return [Block(span.row, max(span.start - 1, 0), span.end + 1) for span in spans]

    def continuous_batching_refusal(self) -> str:
        """Why transformers' continuous-batching engine does not run Ovis2.5 (`vlmprep.batching.support`).

        Returns:
            `str`
        """
        # The engine cuts prompts at its token budget and packs requests into one forward: upstream then counts every
        # packed request's start and end tokens against the items fed in that step.
        return (
            "Ovis2.5 embeds an item's start and end tokens only in a forward that feeds that item, and counts them "
            "against the items fed; the engine may cut a prompt between them and packs requests into one forward, "
            "which it does not feed apart."
        )
