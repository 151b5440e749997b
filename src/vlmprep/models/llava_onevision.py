"""LLaVA-OneVision: anyres images, except that the images of a multi-image sample get only the base crop.

Whether an image gets its anyres grid depends on `batch_num_images` (images per sample): a sample with one image
does, the images of a sample with several do not. That is a property of the sample, not of one image, and
`get_image_features` can only express it for whole samples, so an *item* here is one entry of `batch_num_images`:
one image, or all the images of a multi-image sample, whose placeholder runs are the item's pieces.
Without `batch_num_images` every image is its own item and gets its grid, as upstream does.

Videos (`pixel_values_videos`, `(num_videos, frames, C, H, W)`) are items of their own: one run of pooled frame
tokens plus a newline token each.
"""

import math
from typing import Any

import torch
import transformers

from ..generation import VisionFacts
from ..generation.facts import ModalityFacts
from ..generation.items import ItemSchema, Sizes, flat, sizes
from .base import VisionPrepMixin
from .layouts.anyres import dummy_crop_features, tokens_per_crop, trim_padding_crops
from .layouts.stated_counts import ANYRES_CROPS_PER_SAMPLE

# An item's images: the images of one sample of `batch_num_images` (text-only samples are no item), or each image
# alone without it.
SAMPLES = Sizes("batch_num_images", one_each_without=True)


def trim_sample_crops(model, model_kwargs: dict[str, Any], selected: dict[str, Any]) -> dict[str, Any]:
    """The selected images without their padding crops: an image of a one-image sample has its grid, the images of a
    multi-image sample the base crop only; `batch_num_images` as the list of the items' image counts.

    Args:
        model: the drop-in.
        model_kwargs (`dict[str, Any]`): the call's inputs.
        selected (`dict[str, Any]`): the selected items' inputs.

    Returns:
        `dict[str, Any]`
    """
    if selected.get("batch_num_images") is None:
        return trim_padding_crops(model.config, selected)
    counts = [int(count) for count in selected["batch_num_images"]]
    with_grid = [count == 1 for count in counts for _ in range(count)]
    return trim_padding_crops(model.config, {**selected, "batch_num_images": counts}, with_grid)


class LlavaOnevisionForConditionalGeneration(VisionPrepMixin, transformers.LlavaOnevisionForConditionalGeneration):
    """Drop-in `transformers.LlavaOnevisionForConditionalGeneration` whose vision tower runs once, in input preparation.

    Images and videos are encoded once each, only when prefill needs them.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.llava_onevision import LlavaOnevisionForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_llava_onevision_config
    >>> model = LlavaOnevisionForConditionalGeneration(tiny_llava_onevision_config()).eval()
    >>> sizes = torch.tensor([[8, 13], [8, 13], [13, 8]])  # a sample of one image, then a sample of two
    >>> model.item_token_counts({"image_sizes": sizes, "batch_num_images": [1, 2]})  # base crop + grid; base crops
    [7, [5, 5]]

    ```
    """

    layout = ANYRES_CROPS_PER_SAMPLE

    # `pixel_values` has a crop dimension, `(num_images, crops, C, H, W)`, every crop at `image_size`;
    # `pooler_output` is a list of per-image tensors. `batch_num_images` is split per item with the pixels, never passed whole. A video is one
    # `pixel_values_videos` entry and one placeholder run (its features are checked against the run's length).
    vision_facts = VisionFacts(
        per_image_keys=("image_sizes", "batch_num_images"),
        image_items=ItemSchema(
            (
                flat("pixel_values", SAMPLES),
                flat("image_sizes", SAMPLES),
                sizes("batch_num_images"),  # the items' samples only
            ),
            unpad=trim_sample_crops,
            counted_by=("pixel_values",),
        ),
        pixel_layout="crops",
        features_as_list=True,
        # Upstream reads image features as a list, video features as one `(videos, rows, dim)` tensor
        other_modalities=(ModalityFacts("video", "video_token_id", ("pixel_values_videos",), features_as_list=False),),
    )

    def item_token_counts(
        self, model_kwargs: dict[str, Any], modality: str = "image"
    ) -> int | list[int | list[int]] | None:
        """Placeholders per item: the rows upstream's `pack_image_features` makes (a list per multi-image sample).

        Videos: each frame's patch grid halved (rounded up) by `apply_pooling`, plus one newline token, as
        `LlavaOnevisionProcessor` writes them; videos back to back make one run, which only the count splits. `None`
        without `pixel_values_videos` (one video per run).
        """
        if modality == "video":
            videos = model_kwargs.get("pixel_values_videos")
            if getattr(videos, "ndim", None) != 5:  # none passed, or a shape upstream's `get_video_features` rejects
                return None
            pooled = math.ceil(self.config.vision_config.image_size // self.config.vision_config.patch_size / 2)
            return videos.shape[1] * pooled * pooled + 1  # (num_videos, frames, C, H, W)
        if modality != "image":
            return super().item_token_counts(model_kwargs, modality)
        image_sizes = model_kwargs.get("image_sizes")
        if image_sizes is None:
            return None
        groups = image_groups(model_kwargs.get("batch_num_images"), len(image_sizes))
        with_grid = [len(group) == 1 for group in groups for _ in group]
        strategy = model_kwargs.get("vision_feature_select_strategy") or self.config.vision_feature_select_strategy
        crop_rows = tokens_per_crop(self.model, strategy)
        dummies = [
            dummy_crop_features(self.config, size, crop_rows, grid)
            for size, grid in zip(image_sizes, with_grid, strict=True)
        ]
        packed, _ = self.model.pack_image_features(
            dummies,
            image_sizes,
            image_newline=torch.zeros(1),
            vision_aspect_ratio=model_kwargs.get("vision_aspect_ratio") or self.config.vision_aspect_ratio,
        )
        lengths = [int(features.shape[0]) for features in packed]
        return [lengths[group[0]] if len(group) == 1 else [lengths[i] for i in group] for group in groups]


def image_groups(batch_num_images: Any, num_images: int) -> list[list[int]]:
    """Image indices of each item: one list per entry of `batch_num_images`, or one per image without it.

    Args:
        batch_num_images (`list[int]` or `torch.Tensor`, *optional*): images per sample, as the processor returns.
        num_images (`int`): images passed (`len(image_sizes)`).

    Returns:
        `list[list[int]]`
    """
    if batch_num_images is None:
        return [[image] for image in range(num_images)]
    counts = [int(n) for n in batch_num_images]
    if sum(counts) != num_images:
        raise ValueError(
            f"`batch_num_images` {counts} adds up to {sum(counts)} images but `image_sizes` has {num_images}. Pass "
            "the `batch_num_images`, `image_sizes` and `pixel_values` the processor returned together."
        )
    starts = [sum(counts[:i]) for i in range(len(counts))]
    # A text-only sample (0 images) has no placeholders: it is no item.
    return [list(range(start, start + count)) for start, count in zip(starts, counts, strict=True) if count]
