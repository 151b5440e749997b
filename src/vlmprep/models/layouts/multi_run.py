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

`global_and_local_views` (Step-3.7, DeepSeek-OCR-2): an image is one item made of a global view (`pixel_values`, one
row per image) and its crops (`pixel_values_local`, `num_local_patches` per image), whose features the model joins per
image; its placeholders are one run per view (Step-3.7: each crop between `<patch_start>`/`<patch_end>`, then the
global view between `<im_start>`/`<im_end>`), so the spans take the image in pieces, or one run of every view and a
separator (DeepSeek-OCR-2).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ...generation import VisionFacts
from ...generation.decode_positions import text_after_items
from ...generation.facts import ModalityFacts
from ...generation.hooks import FamilyHooks
from ...generation.items import ItemSchema, Sizes, batched, flat
from ...generation.validation import check_passed_with
from . import Layout
from .patch_grid import PatchGridLayout

__all__ = [
    "GLOBAL_AND_LOCAL_VIEWS_FACTS",
    "PACKED_VIEWS_FACTS",
    "FactsByVideoPlaceholder",
    "GlobalAndLocalViewsLayout",
    "PackedViewsLayout",
    "PackedViewsMultimodalRopeLayout",
    "global_and_local_views",
    "packed_views",
]

# Views of images (`pixel_values`, `target_sizes`) and of video frames (`pixel_values_videos`, `target_sizes_videos`),
# packed alike; `pooler_output` is a list of per-view tensors.
PACKED_VIEWS_FACTS = VisionFacts(
    per_image_keys=("target_sizes",),
    pixel_layout=None,
    fixed_resolution=False,
    features_as_list=True,
    other_modalities=(ModalityFacts("video", "video_token_id", ("pixel_values_videos",), ("target_sizes_videos",)),),
)


def packed_views(facts: ModalityFacts) -> ItemSchema:
    """A modality's views: the pixel columns of each view follow the last, `h * w * patch_size` of them for a `(h, w)`
    row of the sizes (in patches)."""
    columns = Sizes(facts.per_item_keys[0], "prod", times=lambda config: config.vision_config.patch_size)
    return ItemSchema((flat(facts.pixel_keys[0], columns, axis=-1), batched(facts.per_item_keys[0])))


class FactsByVideoPlaceholder:
    """A family's `vision_facts`, with videos only where the model's config has a video placeholder, as upstream reads
    videos only then (transformers' own tester builds MiniCPM-V 4.6 configs without one); read on the class, the
    facts with videos.

    Args:
        facts (`VisionFacts`): the facts with videos.
    """

    def __init__(self, facts: VisionFacts):
        self.with_videos = facts
        self.without_videos = replace(facts, other_modalities=())

    def __get__(self, instance: Any, owner: type) -> VisionFacts:
        if instance is None or getattr(instance.config, "video_token_id", None) is not None:
            return self.with_videos
        return self.without_videos


class PackedViewsLayout(FamilyHooks):
    """Family hooks of the packed-views layout (listed before `VisionPrepMixin`): each view of an image (its global
    view or one slice) is one item of one run, its patches packed along the last dimension of the pixel inputs.

    The merge factor of a view's patch grid into placeholders follows the tower's window merger (skipped under
    `downsample_mode="4x"`) and the merger's `merger_times` rounds of `merge_kernel_size`.
    """

    layout = Layout(
        "packed_views",
        "each view of an image (global view, then each slice) is one run and one item, its patches packed side by "
        "side with a `target_sizes` row",
    )
    vision_facts = FactsByVideoPlaceholder(PACKED_VIEWS_FACTS)
    item_shape = staticmethod(packed_views)

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
        self._check_view_sizes(sizes, modality, model_kwargs)
        merged = self._patches_per_placeholder(model_kwargs)
        return [int(height) * int(width) // merged for height, width in sizes.tolist()]

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise a clear `ValueError` unless the packed pixels are every view's patches side by side, `(1, channels,
        patch_size, total_patches * patch_size)` for the views of the sizes, each view whole merged blocks a side.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): `"image"` or `"video"`.
        """
        pixel_key, sizes_key = self._view_keys(modality)
        pixels = model_kwargs.get(pixel_key)
        if pixels is None:
            return
        check_passed_with(model_kwargs, pixel_key, sizes_key)
        sizes, vision_config = model_kwargs[sizes_key], self.config.vision_config
        self._check_view_sizes(sizes, modality, model_kwargs)
        width = int(sizes.prod(-1).sum()) * vision_config.patch_size
        expected = (1, vision_config.num_channels, vision_config.patch_size, width)
        if not isinstance(pixels, torch.Tensor) or tuple(pixels.shape) != expected:
            shape = tuple(pixels.shape) if isinstance(pixels, torch.Tensor) else type(pixels).__name__
            raise ValueError(
                f"`{pixel_key}` has shape {shape} but this model's vision tower takes every view's patches packed "
                f"side by side, {expected} for the {sizes.shape[0]} view(s) of `{sizes_key}`. Preprocess the "
                f"{modality}s with this model's processor."
            )

    def _check_view_sizes(self, sizes: Any, modality: str, model_kwargs: dict[str, Any]) -> None:
        # A view's sides must be whole merged blocks (the mergers reshape by them): checked before its count is used
        sizes_key = self._view_keys(modality)[1]
        if not isinstance(sizes, torch.Tensor) or sizes.ndim != 2 or sizes.shape[-1] != 2:
            raise ValueError(f"`{sizes_key}` must be `(num_views, 2)`: the (height, width) in patches of each view.")
        side = round(self._patches_per_placeholder(model_kwargs) ** 0.5)  # merged blocks are square
        if bool((sizes % side).any()):
            raise ValueError(
                f"`{sizes_key}` has a view of {sizes.tolist()} patches, not a multiple of {side} a side: this model "
                f"merges {side}x{side} patches into one placeholder (`downsample_mode` "
                f"{model_kwargs.get('downsample_mode') or self.config.downsample_mode!r}). Preprocess the "
                f"{modality}s with its processor, in the same mode."
            )


class PackedViewsMultimodalRopeLayout(PackedViewsLayout):
    """The packed-views layout with multimodal rope (MiniCPM-V 4.7): positions lay each image's views out on one
    canvas (its global view stretched over the slices' grid, each slice at its place, the markers at its corners).

    Upstream computes them once per prompt and keeps `rope_deltas` on the model for later calls, which goes wrong
    when another request runs in between or when new images follow a cached part; here they are the model's own
    `get_rope_index` over the whole prompt, as the patch-grid layout computes Qwen2-VL's. Decoded tokens are numbered
    as `get_rope_index` numbers text after a canvas (its largest position + 1 on every row), not as upstream's
    `generate` does after a prompt ending on `</image>` (the last position + 1 on each row).
    """

    layout = Layout(
        "packed_views_mrope",
        "each view of an image (global view, then each slice) is one run and one item, its patches packed side by "
        "side with a `target_sizes` row; multimodal rope over a canvas of the image's views",
    )
    # The processor marks each placeholder's modality in `mm_token_type_ids` (image 1, video 2), which the positions
    # read: it is sliced with the prompt, and derived from the placeholders when a caller leaves it out.
    vision_facts = FactsByVideoPlaceholder(replace(PACKED_VIEWS_FACTS, token_type_key="mm_token_type_ids"))
    # The same computation as the patch-grid layout's: the model's `get_rope_index` over the whole prompt with each
    # modality's per-item sizes (`target_sizes`, `target_sizes_videos`) and its extras (`downsample_mode`), which
    # reads the patch-grid trait of multimodal positions.
    vision_position_ids = PatchGridLayout.vision_position_ids
    multimodal_positions = True

    def _update_model_kwargs_for_generation(
        self, outputs: Any, model_kwargs: dict[str, Any], is_encoder_decoder: bool = False, num_new_tokens: int = 1
    ) -> dict[str, Any]:
        # Extends upstream's `GenerationMixin._update_model_kwargs_for_generation`, which numbers a decoded token as
        # the last position + 1 on each rope row: after a prompt ending on `</image>` (a canvas corner) that is not
        # where `get_rope_index` puts text over the whole sequence (the canvas's largest position + 1, every row).
        previous = model_kwargs.get("position_ids")
        model_kwargs = super()._update_model_kwargs_for_generation(
            outputs, model_kwargs, is_encoder_decoder=is_encoder_decoder, num_new_tokens=num_new_tokens
        )
        if previous is not None and previous.ndim == 3:
            model_kwargs["position_ids"] = text_after_items(previous, model_kwargs["position_ids"], num_new_tokens)
        return model_kwargs


def global_and_local_views(*per_image: str) -> ItemSchema:
    """Images counted by their global views, one row each, with their crops (`pixel_values_local`, an image's
    `num_local_patches` rows in order, none for some images) and crop counts, and `per_image` inputs of one entry
    per image."""
    crops = flat("pixel_values_local", Sizes("num_local_patches", empty_items=True))
    others = (batched("num_local_patches"), *(batched(key) for key in per_image))
    return ItemSchema((batched("pixel_values"), crops, *others), counted_by=("pixel_values",))


# Images as a global view (`pixel_values`, one row per image) and local crops (`pixel_values_local`, the crops of
# every image in order, `num_local_patches` of them per image); `pooler_output` is a list of per-image tensors.
GLOBAL_AND_LOCAL_VIEWS_FACTS = VisionFacts(
    pixel_keys=("pixel_values", "pixel_values_local"),
    per_image_keys=("num_local_patches",),
    image_items=global_and_local_views(),
    pixel_layout=None,
    fixed_resolution=False,
    features_as_list=True,
)


class GlobalAndLocalViewsLayout(FamilyHooks):
    """Family hooks of an image made of a global view and local crops from two pixel inputs, whose features the
    model joins per image (Step-3.7: one run per crop then one for the global view; DeepSeek-OCR-2: one run of the
    crops, the global view and a separator).

    A family states how many placeholders one view of a given pixel size fills (`view_token_count`) and, as class
    facts, the order of the views and whether they share one run.
    """

    layout = Layout(
        "global_and_local_views",
        "an image is a global view (`pixel_values`) and `num_local_patches` crops (`pixel_values_local`), their "
        "features joined per image; one run per view, or one run of all views and a separator",
    )
    vision_facts = GLOBAL_AND_LOCAL_VIEWS_FACTS
    # Whether the crops' placeholders come before the global view's, whether all views of an image share one run,
    # and how many placeholders after its views an image's run holds (a learned separator's rows).
    local_views_first: bool = True
    views_in_one_run: bool = False
    separator_tokens: int = 0

    def view_token_count(self, height: int, width: int) -> int:
        """Placeholders of one view of `height x width` pixels (the family states its tower's arithmetic)."""
        raise NotImplementedError(f"{type(self).__name__} must state `view_token_count`.")

    def _crops_per_image(self, model_kwargs: dict[str, Any], num_images: int) -> list[int]:
        # Crops of each image, checked against the images and the crops passed (the counts and the pixel split
        # depend on them, so a mismatch is named here rather than as a placeholder-count mismatch).
        crops, local = model_kwargs.get("num_local_patches"), model_kwargs.get("pixel_values_local")
        if crops is None:
            crops = [0] * num_images  # as upstream: no crops
        crops = [int(count) for count in (crops.tolist() if isinstance(crops, torch.Tensor) else crops)]
        passed_crops = 0 if local is None else local.shape[0]
        if len(crops) != num_images or sum(crops) != passed_crops:
            raise ValueError(
                f"`num_local_patches` {crops} does not match the {num_images} image(s) of `pixel_values` and the "
                f"{passed_crops} crop(s) of `pixel_values_local`: pass one count per image, summing to the crops, as "
                "this model's processor returns them."
            )
        return crops

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list | None:
        """Placeholders of each image: per run (a list of its runs' counts) or in its one run.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (the pixel inputs' sizes and `num_local_patches`).
            modality (`str`, *optional*, defaults to `"image"`): this layout has images only.

        Returns:
            `list[int | list[int]]` or `None` (no pixels passed)
        """
        pixels = model_kwargs.get("pixel_values")
        if pixels is None:
            return None
        global_tokens = self.view_token_count(*pixels.shape[-2:])
        local = model_kwargs.get("pixel_values_local")
        local_tokens = self.view_token_count(*local.shape[-2:]) if local is not None else 0
        counts = []
        for crops in self._crops_per_image(model_kwargs, pixels.shape[0]):
            views = [local_tokens] * crops
            views = [*views, global_tokens] if self.local_views_first else [global_tokens, *views]
            counts.append(sum(views) + self.separator_tokens if self.views_in_one_run else views)
        return counts

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise a clear `ValueError` unless the views are `(views, channels, height, width)` tensors of the tower's
        channels (their size may be any: the tower interpolates its position embeddings, and the placeholder counts
        follow the size), crops with their images, as many as `num_local_patches` gives them.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): this layout has images only.
        """
        check_passed_with(model_kwargs, "pixel_values_local", "pixel_values", "each image's global view")
        channels = self._tower_channels()
        for key in self.vision_facts.pixel_keys:
            value = model_kwargs.get(key)
            if value is not None and (not isinstance(value, torch.Tensor) or value.ndim != 4):
                raise ValueError(
                    f"`{key}` must be a `(views, channels, height, width)` tensor, as the processor returns."
                )
            if value is not None and value.shape[1] != channels:
                raise ValueError(
                    f"`{key}` has {value.shape[1]} channel(s) but this model's vision tower takes {channels}: "
                    f"`(views, {channels}, height, width)`. Preprocess the images with this model's processor."
                )
        self._crops_per_image(model_kwargs, model_kwargs["pixel_values"].shape[0])

    def _tower_channels(self) -> int:
        # The tower's input channels (the family's vision config may name them otherwise).
        return self.config.vision_config.num_channels
