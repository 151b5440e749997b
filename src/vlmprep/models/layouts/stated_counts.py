"""Layouts whose families state their placeholder counts themselves: no shared hook code, the name and description only.

A family of one of these layouts lists the layout's class first among its bases, like any other layout, and states
its counts in its `VisionFacts` (a fixed count per image) or in hooks of its own.
"""

from __future__ import annotations

from ...generation.hooks import FamilyHooks


class FixedImageLayout(FamilyHooks):
    """One fixed-resolution image, one run of a fixed count of placeholders (Gemma3, PaliGemma)."""

    layout_name = "fixed_image"
    layout_description = "one fixed-resolution image, one run of a fixed count of placeholders"


class SizedImageLayout(FamilyHooks):
    """An image of any size, padded to the batch's largest, is one run; the family computes its count from
    `image_sizes` (Emu3)."""

    layout_name = "sized_image"
    layout_description = (
        "an image of any size (padded to the batch's largest) is one run, its count from `image_sizes` by the family"
    )


class LinearPatchesLayout(FamilyHooks):
    """Each flattened patch, embedded by one linear layer, is one item with one placeholder (Fuyu)."""

    layout_name = "linear_patches"
    layout_description = "each flattened patch (embedded by one linear layer) is one item of one placeholder"


class TilesLayout(FamilyHooks):
    """Each tile (or crop) of an image is one item with a fixed placeholder count (InternVL, GOT-OCR2)."""

    layout_name = "tiles"
    layout_description = "each tile (or crop) of an image is one item with a fixed placeholder count"


class NaflexTilesLayout(FamilyHooks):
    """Each row of `pixel_values`, a tile of any shape, is one item with a merged patch grid (LFM2-VL)."""

    layout_name = "naflex_tiles"
    layout_description = "each row of `pixel_values` (a tile of any shape) is one item, merged patch grid"


class ProjectorCropsLayout(FamilyHooks):
    """Each crop is one item; the projector's query count follows the crop size (Aria)."""

    layout_name = "projector_crops"
    layout_description = "each crop is one item; the projector's query count follows the crop size"


class AnyresCropsPerSampleLayout(FamilyHooks):
    """Anyres crops, except that the images of a multi-image sample are one item with the base crop only."""

    layout_name = "anyres_crops_per_sample"
    layout_description = "anyres crops; the images of a multi-image sample are one item with the base crop only"


class PatchRowsAndAudioLayout(FamilyHooks):
    """An image is one run of its pooled patch rows, a video one run per frame, an audio clip one run of its
    subsampled frames (Gemma 4: the family states its counts from the position ids and the audio mask)."""

    layout_name = "patch_rows_and_audio"
    layout_description = (
        "an image is one run of its pooled patch rows (a video one run per frame); an audio clip one run of its "
        "subsampled frames"
    )
