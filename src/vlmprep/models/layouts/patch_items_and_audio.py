"""Image patches as items of one placeholder each, and audio clips as one run of their frames (Inkling).

A tower that encodes every patch on its own (no attention or pooling across patches) gives a patch the same features
alone or among its image's other patches: each patch is then an item of the mechanism, one placeholder, encoded once,
cached and hashed on its own wherever a chunk or a cache cuts its image, as Fuyu's linear patches. `pixel_values`
holds every image's patches back to back, in prompt order, one per image placeholder; how many patches an image has
is not a model input (the processor keeps `num_patches` to itself), and need not be.

An audio clip is one run of placeholders, one per real frame of its (padded) frames, read from the modality's
features and mask (`ModalityFacts.pixel_keys[0]` and `per_item_keys[0]`); the family states them as `clip` items, cut
to the real frames so that a clip hashes alike alone or padded in a batch, and how a forward places encoded clip rows
(`EncodedAudioForward`).
"""

from __future__ import annotations

from typing import Any

from ...generation.hooks import FamilyHooks
from . import Layout
from .audio import EncodedAudioForward

__all__ = ["PATCH_GRID_HW_AND_PADDED_AUDIO", "PatchItemsAndAudioLayout", "check_one_patch_per_placeholder"]


def check_one_patch_per_placeholder(model, model_kwargs: dict[str, Any], spans: list, placement: str) -> None:
    """Raise a clear `ValueError` unless the pixel inputs hold one patch per image placeholder of the prompt.

    A family whose items are image patches (Fuyu, Inkling) says what the user passed: patches of images, not images.

    Args:
        model: the drop-in (its `count_items` counts the patches).
        model_kwargs (`dict[str, Any]`): the call's inputs.
        spans (`list[ItemSpan]`): the prompt's image spans, one per placeholder.
        placement (`str`): how the prompt places the patches, for the message (e.g. `"one per patch"`).
    """
    patches = model.count_items(model_kwargs, modality="image")
    placeholders = len({span.item_index for span in spans})
    if patches != placeholders:
        raise ValueError(
            f"`{model.vision_facts.pixel_keys[0]}` holds {patches} image patches but the prompt has {placeholders} "
            f"image placeholder tokens ({placement}). Pass the patches of every image of the prompt, in prompt order "
            "(also of those already in the cache), as the processor makes them with the prompt, or fix the prompt."
        )


class PatchItemsAndAudioLayout(EncodedAudioForward, FamilyHooks):
    """Each image patch is one item of one placeholder (one entry of the pixel input each); an audio clip one run of
    its real frames."""

    layout = Layout(
        "patch_items_and_audio",
        "each image patch (encoded on its own) is one item of one placeholder; an audio clip one run of its real frames, one placeholder each",
    )

    def _audio_keys(self) -> tuple[str, str | None]:
        audio = self._modality_facts("audio")
        return audio.pixel_keys[0], (audio.per_item_keys or (None,))[0]

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | list | None:
        """One placeholder per patch; an audio clip's real frames (all its frames without a mask).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): `"image"` or `"audio"`.

        Returns:
            `int` (images), `list[int]` (one count per clip) or `None` without audio inputs.
        """
        if modality == "image":
            return 1
        features_key, mask_key = self._audio_keys()
        features, mask = model_kwargs.get(features_key), model_kwargs.get(mask_key) if mask_key else None
        if mask is not None:
            return [int(clip_mask.sum()) for clip_mask in mask.bool()]
        return None if features is None else [features.shape[1]] * features.shape[0]

    def check_item_count(self, model_kwargs: dict[str, Any], spans: list, modality: str = "image") -> None:
        """Raise a clear `ValueError` unless the inputs hold one patch per image placeholder (one clip per run).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            spans (`list[ItemSpan]`): the prompt's spans of `modality`.
            modality (`str`, *optional*, defaults to `"image"`): whose items to count.
        """
        if modality != "image":
            return super().check_item_count(model_kwargs, spans, modality=modality)
        check_one_patch_per_placeholder(self, model_kwargs, spans, "one per patch")


# An image is one run of its pixel-shuffled `(h, w)` patch grid (flattened patches of every image back to back,
# `image_grid_hw`); an audio clip one run of its subsampled frames, encoded padded as the call pads it (Nemotron-H
# Omni: the family states its counts and item schemas, and places audio with `EncodedAudioForward`).
PATCH_GRID_HW_AND_PADDED_AUDIO = Layout(
    "patch_grid_hw_and_padded_audio",
    "an image is one run of its pixel-shuffled (h, w) patch grid; an audio clip one run of its subsampled frames, "
    "encoded with its batch's padding",
)
