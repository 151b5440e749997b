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
from ..generation.items import select_items
from .base import VisionPrepMixin
from .layouts.anyres import dummy_crop_features, tokens_per_crop, trim_padding_crops
from .layouts.stated_counts import AnyresCropsPerSampleLayout


class LlavaOnevisionForConditionalGeneration(
    AnyresCropsPerSampleLayout, VisionPrepMixin, transformers.LlavaOnevisionForConditionalGeneration
):
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

    # `pixel_values` has a crop dimension, `(num_images, crops, C, H, W)`, every crop at `image_size`;
    # `pooler_output` is a list of per-image tensors. `batch_num_images` is split per item with the pixels, never passed whole. A video is one
    # `pixel_values_videos` entry and one placeholder run (its features are checked against the run's length).
    vision_facts = VisionFacts(
        per_image_keys=("image_sizes", "batch_num_images"),
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

    def count_items(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """Items passed: the samples of `batch_num_images` with images, or the images when it is not given."""
        if modality != "image":
            return super().count_items(model_kwargs, modality)
        num_images = super().count_items(model_kwargs)
        batch_num_images = model_kwargs.get("batch_num_images")
        if num_images is None or batch_num_images is None:
            return num_images
        expected = sum(int(n) for n in batch_num_images)
        if expected != num_images:
            raise ValueError(
                f"{num_images} image(s) were passed but the prompt has {expected} according to `batch_num_images` "
                f"{[int(n) for n in batch_num_images]}. Pass the `pixel_values`, `image_sizes` and `batch_num_images` "
                "the processor returned together."
            )
        return len(image_groups(batch_num_images, num_images))

    def select_item_inputs(
        self, model_kwargs: dict[str, Any], indices: list[int], modality: str = "image"
    ) -> dict[str, Any]:
        """The pixels and sizes of the items' images, with `batch_num_images` of just those items."""
        if modality != "image":
            return super().select_item_inputs(model_kwargs, indices, modality)
        batch_num_images = model_kwargs.get("batch_num_images")
        image_sizes = model_kwargs.get("image_sizes")
        if batch_num_images is None or image_sizes is None:
            return trim_padding_crops(self.config, super().select_item_inputs(model_kwargs, indices))
        groups = image_groups(batch_num_images, len(image_sizes))
        images = [image for index in indices for image in groups[index]]
        selected = {
            key: select_items(model_kwargs[key], images)
            for key in ("pixel_values", "image_sizes")
            if model_kwargs.get(key) is not None
        }
        selected["batch_num_images"] = [len(groups[index]) for index in indices]  # the items' samples only
        with_grid = [len(groups[index]) == 1 for index in indices for _ in groups[index]]
        return trim_padding_crops(self.config, selected, with_grid)


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
