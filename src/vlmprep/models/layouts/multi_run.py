"""Layouts of an image made of several placeholder runs: a global view and its slices (or crops), each run with its own
token count.

`packed_views` (MiniCPM-V 4.6, MiniCPM-o OCR): the processor NaViT-packs every view of every image (the global view,
then each slice) side by side into one `pixel_values` of shape `(1, channels, patch_size, total_patches * patch_size)`
with one `target_sizes` row `(h, w)` (in patches) per view, and writes each view as one run: the global view between
`<image>`/`</image>`, each slice between `<slice>`/`</slice>`. The tower attends within a view only (its window merger
too), so a view's features depend on its own patches alone, and the model's inputs do not say which image a view
belongs to (the processor drops its `num_patches_per_image`): each view is one item, one run of
`h * w / merged patches` placeholders. An image is thus encoded once, view by view, each view at most once; a prefix
resumes inside or after any view.

`packed_views_mrope` (MiniCPM-V 4.7): the same views, with multimodal rope laid out on a canvas per image.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ...generation import VisionFacts
from ...generation.facts import ModalityFacts
from ...generation.hooks import FamilyHooks
from .patch_grid import PatchGridLayout

__all__ = ["PACKED_VIEWS_FACTS", "PackedViewsLayout", "PackedViewsMultimodalRopeLayout"]

# Views of images (`pixel_values`, `target_sizes`) and of video frames (`pixel_values_videos`, `target_sizes_videos`),
# packed alike; `pooler_output` is a list of per-view tensors.
PACKED_VIEWS_FACTS = VisionFacts(
    per_image_keys=("target_sizes",),
    pixel_layout=None,
    fixed_resolution=False,
    features_as_list=True,
    other_modalities=(ModalityFacts("video", "video_token_id", ("pixel_values_videos",), ("target_sizes_videos",)),),
)


class PackedViewsLayout(FamilyHooks):
    """Family hooks of the packed-views layout (listed before `VisionPrepMixin`): each view of an image (its global
    view or one slice) is one item of one run, its patches packed along the last dimension of the pixel inputs.

    The merge factor of a view's patch grid into placeholders follows the tower's window merger (skipped under
    `downsample_mode="4x"`) and the merger's `merger_times` rounds of `merge_kernel_size`.
    """

    layout_name = "packed_views"
    layout_description = (
        "each view of an image (global view, then each slice) is one run and one item, its patches packed side by "
        "side with a `target_sizes` row"
    )
    vision_facts = PACKED_VIEWS_FACTS

    def _view_keys(self, modality: str) -> tuple[str, str]:
        facts = self._modality_facts(modality)
        return facts.pixel_keys[0], facts.per_item_keys[0]

    def _patches_per_placeholder(self, model_kwargs: dict[str, Any]) -> int:
        # The window merger (2x2 windows into one) runs unless `downsample_mode="4x"`; then each merger round merges
        # a `merge_kernel_size` block into one.
        config = self.config
        mode = model_kwargs.get("downsample_mode") or config.downsample_mode
        window_h, window_w = config.vision_config.window_kernel_size
        merge_h, merge_w = config.merge_kernel_size
        window = 1 if mode == "4x" else window_h * window_w
        return window * (merge_h * merge_w) ** config.merger_times

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list[int] | None:
        """Placeholders of each view: its `h * w` patches over the patches merged into one placeholder.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (`target_sizes`, optionally `downsample_mode`).
            modality (`str`, *optional*, defaults to `"image"`): `"image"` or `"video"`.

        Returns:
            `list[int]` or `None` (no sizes passed)
        """
        sizes = model_kwargs.get(self._view_keys(modality)[1])
        if sizes is None:
            return None
        merged = self._patches_per_placeholder(model_kwargs)
        return [int(height) * int(width) // merged for height, width in sizes.tolist()]

    def count_items(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """Views: rows of the sizes, with the packed pixels checked against them first.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): `"image"` or `"video"`.

        Returns:
            `int` or `None` (neither sizes nor pixels passed)
        """
        pixel_key, sizes_key = self._view_keys(modality)
        pixels, sizes = model_kwargs.get(pixel_key), model_kwargs.get(sizes_key)
        if pixels is None and sizes is None:
            return None
        if sizes is None:
            raise ValueError(
                f"`{pixel_key}` was passed without `{sizes_key}`. Pass both, as this model's processor returns them."
            )
        if pixels is not None:
            self._check_packed_pixels(pixels, sizes, modality, model_kwargs)
        return sizes.shape[0]

    def _check_packed_pixels(
        self, pixels: Any, sizes: torch.Tensor, modality: str, model_kwargs: dict[str, Any]
    ) -> None:
        pixel_key, sizes_key = self._view_keys(modality)
        vision_config = self.config.vision_config
        patch = vision_config.patch_size
        if sizes.ndim != 2 or sizes.shape[-1] != 2:
            raise ValueError(f"`{sizes_key}` must be `(num_views, 2)`: the (height, width) in patches of each view.")
        side = round(self._patches_per_placeholder(model_kwargs) ** 0.5)  # merged blocks are square
        if bool((sizes % side).any()):
            raise ValueError(
                f"`{sizes_key}` has a view of {sizes.tolist()} patches, not a multiple of {side} a side: this model "
                f"merges {side}x{side} patches into one placeholder. Preprocess the {modality}s with its processor."
            )
        width = int(sizes.prod(-1).sum()) * patch
        expected = (1, vision_config.num_channels, patch, width)
        if not isinstance(pixels, torch.Tensor) or tuple(pixels.shape) != expected:
            shape = tuple(pixels.shape) if isinstance(pixels, torch.Tensor) else type(pixels).__name__
            raise ValueError(
                f"`{pixel_key}` has shape {shape} but this model's vision tower takes every view's patches packed "
                f"side by side, {expected} for the {sizes.shape[0]} view(s) of `{sizes_key}`. Preprocess the "
                f"{modality}s with this model's processor."
            )

    def select_item_inputs(
        self, model_kwargs: dict[str, Any], indices: list[int], modality: str = "image"
    ) -> dict[str, Any]:
        """The views' packed patches (each view owns `h * w * patch_size` consecutive columns) and sizes, in order.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            indices (`list[int]`): indices among the views of `modality`.
            modality (`str`, *optional*, defaults to `"image"`): `"image"` or `"video"`.

        Returns:
            `dict[str, Any]`: the pixel inputs and sizes of those views.
        """
        pixel_key, sizes_key = self._view_keys(modality)
        sizes = model_kwargs[sizes_key]
        widths = (sizes.prod(-1) * self.config.vision_config.patch_size).tolist()
        columns = torch.split(model_kwargs[pixel_key], widths, dim=-1)  # per view: (1, C, patch, h * w * patch)
        return {pixel_key: torch.cat([columns[index] for index in indices], dim=-1), sizes_key: sizes[indices]}


class PackedViewsMultimodalRopeLayout(PackedViewsLayout):
    """The packed-views layout with multimodal rope (MiniCPM-V 4.7): positions lay each image's views out on one
    canvas (its global view stretched over the slices' grid, each slice at its place, the markers at its corners).

    Upstream computes them once per prompt and keeps `rope_deltas` on the model for later calls, which goes wrong
    when another request runs in between or when new images follow a cached part; here they are the model's own
    `get_rope_index` over the whole prompt, as the patch-grid layout computes Qwen2-VL's.
    """

    layout_name = "packed_views_mrope"
    layout_description = (
        "each view of an image (global view, then each slice) is one run and one item, its patches packed side by "
        "side with a `target_sizes` row; multimodal rope over a canvas of the image's views"
    )
    # The processor marks each placeholder's modality in `mm_token_type_ids` (image 1, video 2), which the positions
    # read: it is sliced with the prompt, and derived from the placeholders when a caller leaves it out.
    vision_facts = replace(PACKED_VIEWS_FACTS, token_type_key="mm_token_type_ids")
    # The same computation as the patch-grid layout's: the model's `get_rope_index` over the whole prompt with each
    # modality's per-item sizes (`target_sizes`, `target_sizes_videos`) and its extras (`downsample_mode`).
    vision_position_ids = PatchGridLayout.vision_position_ids
