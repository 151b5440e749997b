"""Molmo2: each placeholder pools ViT patches of its image's crops; every image token attends to every other one."""

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.pooled_crops import PooledCropsLayout, pooled_crop_items


class Molmo2ForConditionalGeneration(PooledCropsLayout, VisionPrepMixin, transformers.Molmo2ForConditionalGeneration):
    """Drop-in `transformers.Molmo2ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Every token of type 1 in `mm_token_type_ids` (an image's patches, its start, column and end tokens) attends to
    every other one of the prompt, across images, the text between them causal: the prompt's one block spans the
    first such token to the last, so a cache resumes only before it or after it (a new image in a cached conversation
    recomputes from the first image on, as the uncached forward would see it). Videos are refused for now.

    Example:

    ```python
    >>> from vlmprep import Molmo2ForConditionalGeneration
    >>> from vlmprep.testing import tiny_config
    >>> model = Molmo2ForConditionalGeneration(tiny_config("molmo2")).eval()

    ```
    """

    vision_facts = VisionFacts(
        bidirectional="items",
        token_type_key="mm_token_type_ids",
        per_image_keys=("image_token_pooling", "image_grids", "image_num_crops"),
        image_items=pooled_crop_items(transformers.Molmo2Model),
        pixel_layout=None,
        fixed_resolution=False,
        features_as_list=True,
    )

    def continuous_batching_refusal(self) -> str:
        """Why transformers' continuous-batching engine does not run Molmo2 (`vlmprep.batching.support`).

        Returns:
            `str`
        """
        # Upstream's forward reads `cache.is_initialized` in every call, which the engine's `PagedAttentionCache`
        # lacks: every step would fail, text-only requests included.
        return (
            "transformers' Molmo2 forward reads `cache.is_initialized`, which the engine's paged cache does not have, "
            "so every engine step fails (text requests too)."
        )
