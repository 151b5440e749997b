"""Unlimited-OCR: a SAM tower feeding a CLIP-like encoder, on a mixture-of-experts decoder whose reference
sliding-window (R-SWA) cache layers keep every prompt token and only a window of decoded tokens.

An image is a global view (`pixel_values`) and `num_local_patches` crops (`pixel_values_local`) laid out on a
`patches_grid` of `(columns, rows)`: its one placeholder run is the crops' grid (each row of crop queries ended by a
learned newline), then the global view (each row ended by a newline), then a learned separator
(`layouts/multi_run.py`, `global_and_local_views`, one run per image).

The decoder's cache layers pin the prompt: what the first forward (or a length declared before it) caches is kept
whole, and tokens after it attend the prompt plus a sliding window. Upstream's `_prefill` declares the prompt's length
before the first forward; vlmprep runs upstream's `_prefill` once per prefill chunk, so this family declares the whole
prompt's length before the first chunk (`_prefill` below). A caller's cache continues as one uncached forward of the
whole conversation computes it (vlmprep's bar): the tokens after its pinned prompt join the pinned part (or are
recomputed when the window already slid), where upstream `generate` would decode the new prompt's tokens in the window
(so upstream's `test_generate_*_sliding_window_too_small` see a longer pinned part; a non-empty static cache of these
layers is refused). A stored prefix cannot be resumed exactly (the pinned part
is whichever prompt came first, and decoded tokens past the window are gone): the prefix store refuses these layers
(`vlmprep.generation.prefix_layers.layer_refusal`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
import transformers

from ..cache.pinned_prompt import declare_pinned_prompt_length, reopen_pinned_prompt
from .base import VisionPrepMixin
from .layouts.multi_run import GLOBAL_AND_LOCAL_VIEWS_FACTS, GlobalAndLocalViewsLayout, global_and_local_views

# The `(columns, rows)` of each image's crops change where its features go: hashed with its pixels. The processor
# returns both lists, as upstream takes them.
UNLIMITED_OCR_FACTS = replace(
    GLOBAL_AND_LOCAL_VIEWS_FACTS,
    per_image_keys=("num_local_patches", "patches_grid"),
    image_items=global_and_local_views("patches_grid"),
)


class UnlimitedOcrForConditionalGeneration(
    GlobalAndLocalViewsLayout, VisionPrepMixin, transformers.UnlimitedOcrForConditionalGeneration
):
    """Drop-in `transformers.UnlimitedOcrForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.unlimited_ocr import UnlimitedOcrForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_unlimited_ocr_config
    >>> model = UnlimitedOcrForConditionalGeneration(tiny_unlimited_ocr_config()).eval()
    >>> views = {"pixel_values": torch.zeros(1, 3, 32, 32), "pixel_values_local": torch.zeros(2, 3, 16, 16)}
    >>> model.item_token_counts({**views, "num_local_patches": [2], "patches_grid": [[2, 1]]})  # 10 + 20 + 1
    [31]

    ```
    """

    vision_facts = UNLIMITED_OCR_FACTS
    views_in_one_run = True
    separator_tokens = 1

    def view_token_count(self, height: int, width: int) -> int:
        """Queries a side of a `height x width` view: its patch grid quartered by the tower's two stride-2
        convolutions (the processor's `downsample_ratio` of 4)."""
        return math.ceil(max(height, width) // self.config.vision_config.sam_config.patch_size / 4)

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list | None:
        """Placeholders of each image's one run: its crops' rows (`rows * q` rows of `columns * q + 1`), its global
        view (`Q` rows of `Q + 1`) and the separator.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (pixel sizes, `num_local_patches`, `patches_grid`).
            modality (`str`, *optional*, defaults to `"image"`): this family has images only.

        Returns:
            `list[int]` or `None` (no pixels passed)
        """
        pixels = model_kwargs.get("pixel_values")
        if pixels is None:
            return None
        crops = self._crops_per_image(model_kwargs, pixels.shape[0])
        grids = self._patches_grids(model_kwargs, crops)
        side = self.view_token_count(*pixels.shape[-2:])
        local = model_kwargs.get("pixel_values_local")
        crop_side = self.view_token_count(*local.shape[-2:]) if local is not None else 0
        counts = []
        for count, (columns, rows) in zip(crops, grids, strict=True):
            crop_rows = rows * crop_side * (columns * crop_side + 1) if count else 0
            counts.append(crop_rows + side * (side + 1) + self.separator_tokens)
        return counts

    def _tower_channels(self) -> int:
        # The SAM tower takes the pixels (its config is nested in the vision config).
        return self.config.vision_config.sam_config.num_channels

    def _patches_grids(self, model_kwargs: dict[str, Any], crops: list[int]) -> list[tuple[int, int]]:
        # Each image's `(columns, rows)` of crops, checked against its crop count (upstream reshapes by it).
        grids = model_kwargs.get("patches_grid")
        if grids is None:
            if any(crops):
                raise ValueError(
                    "`pixel_values_local` was passed without `patches_grid`: pass the processor's output."
                )
            return [(0, 0)] * len(crops)
        grids = grids.tolist() if isinstance(grids, torch.Tensor) else grids
        grids = [tuple(int(side) for side in grid) for grid in grids]
        for count, grid in zip(crops, grids, strict=False):
            if len(grid) != 2 or (count and grid[0] * grid[1] != count):
                raise ValueError(
                    f"`patches_grid` {grids} does not match `num_local_patches` {crops}: pass one `(columns, rows)` "
                    "per image whose product is its crop count, as this model's processor returns them."
                )
        if len(grids) != len(crops):
            raise ValueError(f"`patches_grid` has {len(grids)} entries for {len(crops)} image(s): pass one per image.")
        return grids

    def continuous_batching_refusal(self) -> str:
        """Why transformers' continuous-batching engine does not run this family (`vlmprep.batching.support`).

        Returns:
            `str`
        """
        return (
            "its decoder's reference sliding-window layers pin each prompt and keep a window of its answer, which "
            "transformers' paged cache (full and sliding-window attention layers only) does not hold."
        )

    def _maybe_prepare_encoder_kwargs_for_generation(
        self,
        inputs_tensor: torch.Tensor,
        model_kwargs: dict[str, Any],
        model_input_name: str | None,
        generation_config,
    ) -> dict[str, Any]:
        # Before the prompt is planned (its resume point read from the cache): a caller's cache is reopened so that
        # the rest of the prompt is pinned with what it holds, as one forward of the whole prompt computes it.
        cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
        if cache is not None and cache.get_seq_length() > 0:
            reopen_pinned_prompt(cache, prompt_length=inputs_tensor.shape[-1])
        return super()._maybe_prepare_encoder_kwargs_for_generation(
            inputs_tensor, model_kwargs, model_input_name, generation_config
        )

    def _prefill(
        self, input_ids: torch.LongTensor, generation_config, model_kwargs: dict, is_first_iteration: bool = True
    ):
        # vlmprep runs upstream's `_prefill` once per chunk, and upstream declares the prompt's length only while the
        # cache is empty: it would pin the first chunk alone, and the rest of the prompt would slide out of the
        # window. The whole prompt's length (cached tokens included) is declared here, before the first chunk (a
        # declaration is kept once made).
        cache = model_kwargs.get("cache")
        if is_first_iteration and cache is not None:
            planned = model_kwargs.get("mm_encoder_outputs")
            mask = model_kwargs.get("attention_mask")
            # The plan's end is the whole prompt's length, also when the caller passed only the tokens after the cache
            prompt_length = getattr(planned, "end", None) or (
                mask.shape[-1] if mask is not None else self._get_prefill_length(input_ids, model_kwargs)
            )
            declare_pinned_prompt_length(cache, prompt_length)
        return super()._prefill(input_ids, generation_config, model_kwargs, is_first_iteration=is_first_iteration)
