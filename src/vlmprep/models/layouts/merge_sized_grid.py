"""The merge-sized patch-grid layout (VideoLLaMA3): flattened patches on a `(t, h, w)` grid per item, each item with
its own merge size, 1D positions, and videos whose kept rows a compression mask states.

`pixel_values` rows are single-frame patches, `(total_patches, channels * patch**2)`, with one `image_grid_thw` row
and one `image_merge_sizes` entry per image; an image is one run of `t * h * w / merge_size**2` placeholders. A video
(`pixel_values_videos`, `video_grid_thw`, `video_merge_sizes`) is one run per frame, after the frame's timestamp text,
of the frame's rows that `video_compression_mask` keeps (the processor drops patches that repeat the previous frame's,
and writes each frame's run with the count it kept): the mask covers every video's merged rows in order.
"""

from __future__ import annotations

from typing import Any

import torch

from ...generation import VisionFacts
from ...generation.facts import ModalityFacts
from ...generation.items import ItemSchema, Sizes, batched, flat, grid_rows
from ...generation.validation import check_companion_input
from . import Layout
from .patch_grid import PatchGridLayout, PatchGridVisionNames

__all__ = ["MERGE_SIZED_GRID_FACTS", "MergeSizedGridLayout"]

MERGE_SIZED_GRID_FACTS = VisionFacts(
    token_type_key="mm_token_type_ids",
    per_image_keys=("image_grid_thw", "image_merge_sizes"),
    fixed_resolution=False,
    features_as_list=True,
    other_modalities=(
        ModalityFacts(
            "video",
            "video_token_id",
            ("pixel_values_videos",),
            ("video_grid_thw", "video_merge_sizes", "video_compression_mask"),
            kept_rows_key="video_compression_mask",
        ),
    ),
)


def merge_sized_grid_rows(facts: ModalityFacts) -> ItemSchema:
    """A modality's grid rows (`grid_rows`) with each item's merge size; a video's stretch of the compression mask
    follows the last, one entry per merged row of the video."""
    grid_key, merge_key = facts.per_item_keys[:2]
    kept = () if facts.kept_rows_key is None else (flat(facts.kept_rows_key, Sizes(grid_key, computed=_mask_shares)),)
    return grid_rows(facts.pixel_keys[0], grid_key, batched(merge_key), *kept)


def _mask_shares(model, model_kwargs: dict[str, Any]) -> list[int]:
    # Each video's merged rows, the shares of its compression mask (none without grids: the mask is then unmatched)
    return model._merged_rows(model_kwargs, "video") or []


class MergeSizedGridLayout(PatchGridLayout):
    """Patch grids with a merge size per item and 1D positions; a video one run per frame of its kept rows."""

    layout = Layout(
        "merge_sized_grid",
        "flattened patches on a (t, h, w) grid per item with its own merge size, a video one run per frame of the "
        "rows its compression mask keeps, 1D text positions",
    )
    multimodal_positions = False
    vision_facts = MERGE_SIZED_GRID_FACTS
    vision_config_names = PatchGridVisionNames(temporal_patch_size=None, channels="num_channels")
    item_shape = staticmethod(merge_sized_grid_rows)

    def _merged_rows(self, model_kwargs: dict[str, Any], modality: str) -> list[int] | None:
        # Merged rows of each item before any compression: `t * h * w / merge_size**2`.
        grid_key, merge_key = self._modality_facts(modality).per_item_keys[:2]
        grid = model_kwargs.get(grid_key)
        if grid is None:
            return None
        merge_sizes = model_kwargs.get(merge_key)
        if merge_sizes is None or tuple(merge_sizes.shape) != (grid.shape[0],):
            raise ValueError(
                f"`{grid_key}` was passed without `{merge_key}` (one merge size per {modality}), or with a different "
                f"number of entries. Pass both, as this model's processor returns them."
            )
        return (grid.prod(-1) // merge_sizes.to(grid.device) ** 2).tolist()

    def _kept_mask(self, model_kwargs: dict[str, Any], rows: list[int]) -> torch.Tensor | None:
        mask = model_kwargs.get("video_compression_mask")
        entry = "(with `video_merge_sizes`) one mask entry per merged row of every video"
        check_companion_input(mask, "video_compression_mask", (sum(rows),), "video_grid_thw", entry, required=False)
        return mask

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list | None:
        """Placeholders of each item: an image's merged rows; a video's kept rows of each frame (frames keeping none
        have no run).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (grids, merge sizes, compression mask).
            modality (`str`, *optional*, defaults to `"image"`): `"image"` or `"video"`.

        Returns:
            `list[int]` (images), `list[list[int]]` (videos: per frame) or `None` (no grids passed)
        """
        rows = self._merged_rows(model_kwargs, modality)
        if rows is None or modality != "video":
            return rows
        mask = self._kept_mask(model_kwargs, rows)
        frames = model_kwargs["video_grid_thw"][:, 0].tolist()
        counts = []
        for video_rows, video_mask, t in zip(
            rows, torch.split(mask, rows) if mask is not None else [None] * len(rows), frames, strict=True
        ):
            per_frame = [video_rows // t] * t if video_mask is None else video_mask.reshape(t, -1).sum(-1).tolist()
            counts.append([count for count in per_frame if count > 0])
        return counts
