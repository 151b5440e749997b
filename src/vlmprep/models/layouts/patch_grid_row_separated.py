"""The row-separated patch-grid layout (HY-V4-VL): an item's run also holds one newline embedding after each merged row
of each frame, and its positions are the model's own multimodal rope (`get_rope_index`, three axes)."""

from __future__ import annotations

import torch

from . import Layout
from .patch_grid import PatchGridLayout

__all__ = ["PatchGridRowSeparatedLayout"]


class PatchGridRowSeparatedLayout(PatchGridLayout):
    """Patch grids whose item run is `t * h' * (w' + 1)` placeholders (`h' = h / merge_size`, `w' = w / merge_size`):
    the merger appends a newline embedding to every merged row of every frame. A video is one run, as an image."""

    layout = Layout(
        "patch_grid_row_separated",
        "flattened patches on a (t, h, w) grid per item, its run also holding a newline after each merged row, multimodal rope positions",
    )

    def grid_token_counts(self, grid: torch.Tensor, modality: str) -> torch.Tensor:
        """Placeholders of each item (`PatchGridLayout.grid_token_counts`): per frame, its merged rows, each followed
        by a newline."""
        merge = self.vision_config_names.merge_size_of(self.config.vision_config)
        rows, columns = grid[:, 0] * (grid[:, 1] // merge), grid[:, 2] // merge
        return rows * (columns + 1)
