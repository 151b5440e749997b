"""Layout of an image whose crops are pooled per placeholder by indices into the crops' patches (Molmo2).

The processor cuts each image into crops (a low-resolution view of the whole image, then high-resolution crops), all
of the call's crops stacked in `pixel_values` `(total_crops, patches_per_crop, patch_size**2 * channels)`, with
`image_num_crops` crops per image. Each placeholder is one pooled token: its row of `image_token_pooling`
`(total_tokens, pool_h * pool_w)` lists the patches it pools (`-1` for padding), as indices into the flattened patches
of *every* crop of the call (transformers 5.24) or of its own image's crops (5.25 on, where `get_image_features` takes
`image_num_crops` to rebase them). The tower attends within a crop and the adapter within a token's patches, so an
image's features depend on its own crops alone: an item is one image, its crops cut out by `image_num_crops` and its
indices relative to its first crop, so that it encodes (and hashes) alike alone or in any call, under either version.

An image's placeholders are its low-resolution grid (`image_grids[:, :2]` tokens a side) then its high-resolution grid
(`image_grids[:, 2:]`), each in several runs when the processor puts a column token after every row: the runs are read
from the prompt and grouped into images by those counts.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

from ...generation.hooks import FamilyHooks
from ...generation.items import ItemSchema, Sizes, batched, flat
from ...generation.spans import find_runs
from ...generation.validation import check_passed_with
from . import Layout

__all__ = ["PooledCropsLayout", "pooled_crop_items"]


@functools.lru_cache(maxsize=8)
def pooling_indexes_each_image(encoder_class: type) -> bool:
    """Whether `encoder_class.get_image_features` reads `image_token_pooling` per image (transformers 5.25 on).

    5.25 changed processor and model together: the processor stopped shifting an image's indices past the crops of the
    images before it, and `get_image_features` took `image_num_crops` to shift them itself (refusing several images
    without it). The new parameter is the one sign of the new convention, read once per class.

    Args:
        encoder_class (`type`): the class whose `get_image_features` encodes the images (`Molmo2Model`).

    Returns:
        `bool`: `True` for indices local to each image (5.25 on), `False` for indices over the whole call (5.24).
    """
    return "image_num_crops" in inspect.signature(encoder_class.get_image_features).parameters


def image_token_totals(image_grids: torch.Tensor) -> list[int]:
    """Placeholders of each image: `low_h * low_w + high_h * high_w` from its `image_grids` row."""
    return (image_grids[:, 0] * image_grids[:, 1] + image_grids[:, 2] * image_grids[:, 3]).tolist()


# The inputs that say which crops and patches each image's tokens pool, needed with `pixel_values`
POOLED_CROP_KEYS = ("image_grids", "image_token_pooling", "image_num_crops")


def _pooled_tokens(model, model_kwargs: dict[str, Any]) -> list[int]:
    # Each image's rows of `image_token_pooling`: one per placeholder, by its `image_grids` row
    why = "with `image_num_crops`, it says which crops and patches each image pools"
    check_passed_with(model_kwargs, "image_token_pooling", "image_grids", why)
    return image_token_totals(model_kwargs["image_grids"])


def pooled_crop_items(encoder_class: type) -> ItemSchema:
    """An image's crops (`image_num_crops` of `pixel_values`), its rows of `image_token_pooling` and of `image_grids`,
    as `encoder_class.get_image_features` takes them: on transformers 5.24 the pooling indices over the crops of the
    whole call, rebased to the selection's crops; from 5.25 on each image's own, with its crop count.

    Args:
        encoder_class (`type`): the class whose `get_image_features` encodes the images (`Molmo2Model`).

    Returns:
        `ItemSchema`
    """
    per_image = pooling_indexes_each_image(encoder_class)
    pooling = Sizes("image_grids", computed=_pooled_tokens)
    inputs = (
        flat("pixel_values", Sizes("image_num_crops")),
        flat("image_token_pooling", pooling, rebased_on=None if per_image else "pixel_values"),
        batched("image_grids"),
    )
    # 5.25 on: `get_image_features` shifts each image's indices past the crops before it, by their counts
    crop_counts = (batched("image_num_crops"),) if per_image else ()
    return ItemSchema((*inputs, *crop_counts), counted_by=("pixel_values",))


def group_runs(run_lengths: list[int], totals: list[int]) -> list[list[int]]:
    """The placeholder runs of the prompt grouped into images, in order: consecutive runs adding up to each image's total.

    Images left over once the runs are used up are dropped, so that the image count check names both counts.

    Args:
        run_lengths (`list[int]`): lengths of the prompt's placeholder runs, in reading order.
        totals (`list[int]`): placeholders of each image (`image_token_totals`).

    Returns:
        `list[list[int]]`: the run lengths of each image.

    Raises:
        `ValueError`: an image's runs do not add up to its count, or runs are left over.
    """
    runs, images = list(run_lengths), []
    for index, total in enumerate(totals):
        if not runs:
            break
        pieces: list[int] = []
        while runs and sum(pieces) < total:
            pieces.append(runs.pop(0))
        if sum(pieces) != total:
            raise ValueError(
                f"Image {index}'s `image_grids` row gives it {total} placeholder tokens, but the prompt's placeholder "
                f"runs from there hold {sum(pieces)}, which does not match the images' token counts: pass the "
                "`input_ids`, `image_grids` and `image_token_pooling` the processor returned together, with every "
                "image of the prompt (also those already in the cache)."
            )
        images.append(pieces)
    if runs:
        raise ValueError(
            f"The prompt has more image placeholder tokens than the {len(totals)} images passed give ({sum(totals)} "
            f"tokens by `image_grids`, {sum(totals) + sum(runs)} in the prompt): pass every image of the prompt, in "
            "prompt order (also those already in the cache), or fix the prompt."
        )
    return images


class PooledCropsLayout(FamilyHooks):
    """An image is one item: its crops (`image_num_crops`) and its rows of `image_token_pooling`, rebased to its first
    crop; its placeholders are the runs of its low- and high-resolution token grids (Molmo2)."""

    layout = Layout(
        "pooled_crops",
        "an image is its crops and its pooling rows (indices rebased to its first crop); its placeholders, the runs of "
        "its low- and high-resolution grids, read from the prompt",
    )

    def prompt_item_token_counts(
        self, input_ids: torch.Tensor, model_kwargs: dict[str, Any], modality: str = "image"
    ) -> list | None:
        """The run lengths of each image, read from the prompt and grouped by the images' `image_grids` counts.

        Args:
            input_ids (`torch.Tensor`): the prompt's ids.
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): images only.

        Returns:
            `list[list[int]]` or `None` (no images)
        """
        if model_kwargs.get("pixel_values_videos") is not None:  # their frames' runs would be read as images'
            raise ValueError(
                f"{type(self).__name__} does not take videos yet (their frames share the image placeholder, pooled "
                "from `video_token_pooling`): pass images, or use the transformers class for videos."
            )
        image_grids = model_kwargs.get("image_grids")
        if modality != "image" or image_grids is None:
            return None
        placeholder = self.vision_facts.placeholder_id(self.config)
        runs = [end - start for _, start, end in find_runs(input_ids == placeholder)]
        return group_runs(runs, image_token_totals(image_grids))

    def count_items(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """Images of the call: one `image_grids` row each, given their crops (`pixel_values`).

        The one hook the item schema (`pooled_crop_items`) does not serve: on transformers 5.24 the encoder's inputs,
        a selection of items, hold no crop counts (its `get_image_features` takes none), so the items are counted by
        their grids rather than by splitting the crops.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): images only.

        Returns:
            `int` or `None`
        """
        if model_kwargs.get("pixel_values") is None:
            return None
        why = "with `image_token_pooling` and `image_num_crops`, it says which crops and patches each image pools"
        check_passed_with(model_kwargs, "pixel_values", "image_grids", why)
        return model_kwargs["image_grids"].shape[0]

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise a clear `ValueError` unless the crops, their counts and the pooling rows agree.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): images only.
        """
        pixel_values = model_kwargs.get("pixel_values")
        if modality != "image" or not isinstance(pixel_values, torch.Tensor):
            return
        missing = [key for key in POOLED_CROP_KEYS if model_kwargs.get(key) is None]
        if missing:
            raise ValueError(
                f"`pixel_values` came without {missing}: pass every image input the processor returns "
                "(`image_grids`, `image_token_pooling`, `image_num_crops`), which say which crops and patches each "
                "image's tokens pool."
            )
        vision = self.config.vision_config
        patch_dim = vision.patch_size**2 * vision.num_channels
        if pixel_values.ndim != 3 or pixel_values.shape[1:] != (vision.num_position_embeddings, patch_dim):
            raise ValueError(
                f"The vision tower takes `pixel_values` of shape `(total_crops, {vision.num_position_embeddings}, "
                f"{patch_dim})` (each crop's flattened patches, as the processor returns them), got "
                f"{tuple(pixel_values.shape)}."
            )
        num_crops, totals = model_kwargs["image_num_crops"], image_token_totals(model_kwargs["image_grids"])
        if int(num_crops.sum()) != pixel_values.shape[0] or len(num_crops) != len(totals):
            raise ValueError(
                f"`image_num_crops` {num_crops.tolist()} must give one count per `image_grids` row ({len(totals)}) "
                f"adding up to the {pixel_values.shape[0]} crops of `pixel_values`."
            )
        if model_kwargs["image_token_pooling"].shape[0] != sum(totals):
            raise ValueError(
                f"`image_token_pooling` has {model_kwargs['image_token_pooling'].shape[0]} rows, but `image_grids` "
                f"gives the images {sum(totals)} tokens: pass them as the processor returned them."
            )
