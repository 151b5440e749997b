"""The named pixel/placeholder layouts that family files pick from.

A layout is how one family's pixel inputs split into *items* (an image, a tile, a crop, a video) and how many
placeholder tokens each item fills. A family with a layout of its own states it in its file; a layout that several
families share lives in a module here, as a class of family hooks listed before `VisionPrepMixin` (and,
where it has one, the `VisionFacts` that go with it). Family files import layouts, the registry and the mixin, never
each other.

`LAYOUTS` names every layout; `vlmprep.models.registry` says which one each family uses, and
`utils/check_exports.py` checks that a drop-in inherits its layout's hooks. The layout modules are imported only by
the families that use them (importing this package imports none of them).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LAYOUTS", "Layout"]


@dataclass(frozen=True)
class Layout:
    """One named layout.

    Args:
        description (`str`): how the items and their placeholders look, in one line (shown in docs/families.md).
        hooks (`str`, *optional*):
            `"<module>.<class>"` of the shared family hooks in `vlmprep.models.layouts`, which every family of this
            layout inherits; `None` when each family states its counts itself (a fixed count per image).
    """

    description: str
    hooks: str | None = None


LAYOUTS: dict[str, Layout] = {
    "fixed_image": Layout("one fixed-resolution image, one run of a fixed count of placeholders"),
    "sized_image": Layout(
        "an image of any size (padded to the batch's largest) is one run, its count from `image_sizes` by the family"
    ),
    "vision_patches": Layout(
        "one fixed-resolution image, one run of its vision patch tokens", "vision_patches.VisionPatchesLayout"
    ),
    "tiles": Layout("each tile (or crop) of an image is one item with a fixed placeholder count"),
    "pixel_shuffled_tiles": Layout(
        "each tile of an image is one item, its patch grid pixel-shuffled", "tiles.PixelShuffledTilesLayout"
    ),
    "naflex_tiles": Layout("each row of `pixel_values` (a tile of any shape) is one item, merged patch grid"),
    "projector_crops": Layout("each crop is one item; the projector's query count follows the crop size"),
    "anyres_crops": Layout(
        "an image is a base crop and a grid of crops, placeholders from upstream's packing", "anyres.AnyresCropsLayout"
    ),
    "anyres_crops_per_sample": Layout(
        "anyres crops; the images of a multi-image sample are one item with the base crop only"
    ),
    "sub_images": Layout(
        "each real sub-image of `(batch, sub_images, C, H, W)` pixels is one item", "sub_images.SubImagesLayout"
    ),
    "pixtral_image": Layout("an image of any size is one run of its merged patches", "pixtral.PixtralImagesLayout"),
    "pixtral_rows": Layout(
        "an image of any size is one run per row of merged patches, split by break tokens",
        "pixtral.PixtralRowsLayout",
    ),
    "patch_grid": Layout(
        "flattened patches on a (t, h, w) grid per item, multimodal rope positions", "patch_grid.PatchGridLayout"
    ),
    "patch_grid_text_positions": Layout(
        "flattened patches on a (t, h, w) grid per item, 1D text positions",
        "patch_grid.PatchGridTextPositionsLayout",
    ),
    "patch_grid_per_frame": Layout(
        "flattened patches on a (t, h, w) grid per item, a video one run per frame, multimodal rope positions",
        "patch_grid.PatchGridPerFrameLayout",
    ),
    "patch_grid_per_frame_text_positions": Layout(
        "flattened patches on a (t, h, w) grid per item, a video one run per frame, 1D text positions",
        "patch_grid.PatchGridPerFrameTextPositionsLayout",
    ),
}
