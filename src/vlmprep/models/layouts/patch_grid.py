"""Patch-grid layouts (Qwen2-VL and the families built like it): flattened patches on a `(t, h, w)` grid per item.

Pixel inputs are flattened patches, `(total_patches, patch_dim)`, with one `(t, h, w)` grid row per item (an image
or a video); an item has `t * h * w / spatial_merge_size**2` placeholders. Variants: positions are 3D multimodal rope
(M-RoPE) or plain 1D, and a video is one run or one run per frame (temporal patch). Inkling2's grids count
placeholders instead, with one pixel row (a square of merged patches) per placeholder.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from typing import Any

import torch

from ...generation import VisionFacts
from ...generation.facts import ModalityFacts
from ...generation.hooks import FamilyHooks
from ...generation.items import grid_rows
from ...generation.validation import check_every_row_attends, check_passed_with
from . import Layout, layout_of

__all__ = [
    "MM_TOKEN_TYPES",
    "PATCH_GRID_CACHE_POSITIONS_FACTS",
    "PATCH_GRID_FACTS",
    "PATCH_GRID_IMAGE_ONLY_FACTS",
    "PATCH_GRID_SHARED_PLACEHOLDER_FACTS",
    "PatchGridLayout",
    "PatchGridVisionNames",
    "TokenGridTextPositionsLayout",
]

# Placeholder types of `mm_token_type_ids`, as the processors number them (0 is text).
MM_TOKEN_TYPES = {"image": 1, "video": 2}

# Images and videos: `pixel_values` / `pixel_values_videos` rows with their grids, features a list of per-item
# tensors; positions from the token types.
PATCH_GRID_FACTS = VisionFacts(
    token_type_key="mm_token_type_ids",
    per_image_keys=("image_grid_thw",),
    fixed_resolution=False,
    features_as_list=True,
    other_modalities=(ModalityFacts("video", "video_token_id", ("pixel_values_videos",), ("video_grid_thw",)),),
)

# As `PATCH_GRID_FACTS`, but a video frame's placeholders are image placeholders (GLM-4V and its variants, inside
# `<|begin_of_video|>...<|end_of_video|>`): only the processor's `mm_token_type_ids` tell images and frames apart.
PATCH_GRID_SHARED_PLACEHOLDER_FACTS = VisionFacts(
    token_type_key="mm_token_type_ids",
    per_image_keys=("image_grid_thw",),
    fixed_resolution=False,
    features_as_list=True,
    image_token_type=MM_TOKEN_TYPES["image"],
    other_modalities=(
        ModalityFacts(
            "video", "image_token_id", ("pixel_values_videos",), ("video_grid_thw",), MM_TOKEN_TYPES["video"]
        ),
    ),
)

# As `PATCH_GRID_FACTS`, for a family whose model takes no videos (PaddleOCR-VL): a `video_token_id` in its config is
# never read, so no video inputs are accepted.
PATCH_GRID_IMAGE_ONLY_FACTS = replace(PATCH_GRID_FACTS, other_modalities=())


# As `PATCH_GRID_FACTS`, for a family whose `generate` drops `position_ids` and numbers tokens by their place in the
# cache (EXAONE 4.5, HyperCLOVAX): a token's KV then depends on its row's left padding.
PATCH_GRID_CACHE_POSITIONS_FACTS = replace(PATCH_GRID_FACTS, positions_from_cache_length=True)


@dataclass(frozen=True)
class PatchGridVisionNames:
    """The vision-config attributes the patch-grid layout reads, as each family's config names them.

    Qwen2-VL's names are the defaults; a family whose vision config names the same numbers differently (Muse Glimmer's
    `merge_size` and `patch_temporal`) states its own names, so the layout's arithmetic stays in one place.

    Args:
        merge_size (`str`, *optional*, defaults to `"spatial_merge_size"`):
            side of the square of patches merged into one placeholder.
        temporal_patch_size (`str`, *optional*, defaults to `"temporal_patch_size"`):
            frames per patch; `None` when the tower reads one frame per patch (PaddleOCR-VL, Cosmos3 Edge).
        channels (`str`, *optional*, defaults to `"in_channels"`):
            channels per pixel; `None` when the tower hard-codes RGB (3) and its config has no such attribute.
        flat_patches (`bool`, *optional*, defaults to `True`):
            whether a patch comes as one flattened row (Qwen2-VL) or as a `(channels * frames, patch, patch)` image
            (PaddleOCR-VL's convolutional patch embedding).
    """

    merge_size: str = "spatial_merge_size"
    temporal_patch_size: str | None = "temporal_patch_size"
    channels: str | None = "in_channels"
    flat_patches: bool = True

    def merge_size_of(self, vision_config: Any) -> int:
        """The merge side of a vision config."""
        return getattr(vision_config, self.merge_size)

    def patch_shape_of(self, vision_config: Any) -> tuple[int, ...]:
        """The shape of one patch of `pixel_values`: `(channels * temporal patch * patch_size**2,)` flattened, else
        `(channels * temporal patch, patch_size, patch_size)`."""
        channels = 3 if self.channels is None else getattr(vision_config, self.channels)
        frames = 1 if self.temporal_patch_size is None else getattr(vision_config, self.temporal_patch_size)
        patch_size = vision_config.patch_size
        if self.flat_patches:
            return (channels * frames * patch_size**2,)
        return (channels * frames, patch_size, patch_size)


_GRID = "flattened patches on a (t, h, w) grid per item"
PATCH_GRID = Layout("patch_grid", f"{_GRID}, multimodal rope positions")
PATCH_GRID_TEXT_POSITIONS = Layout("patch_grid_text_positions", f"{_GRID}, 1D text positions")
PATCH_GRID_PER_FRAME = Layout("patch_grid_per_frame", f"{_GRID}, a video one run per frame, multimodal rope positions")
PATCH_GRID_PER_FRAME_TEXT_POSITIONS = Layout(
    "patch_grid_per_frame_text_positions", f"{_GRID}, a video one run per frame, 1D text positions"
)
# (multimodal positions, a video one run per frame) -> the layout those traits make
_LAYOUT_OF_TRAITS = {
    (True, False): PATCH_GRID,
    (False, False): PATCH_GRID_TEXT_POSITIONS,
    (True, True): PATCH_GRID_PER_FRAME,
    (False, True): PATCH_GRID_PER_FRAME_TEXT_POSITIONS,
}


class PatchGridLayout(FamilyHooks):
    """Family hooks of the patch-grid layouts (listed before `VisionPrepMixin`).

    A family states two traits as values: `multimodal_positions` (3D M-RoPE, `True`, or its decoder's plain 1D
    positions) and `video_runs_per_frame` (a video is one run, or one run per frame between timestamps); its layout
    (`PATCH_GRID`, ...) follows from them. M-RoPE positions upstream come from `rope_deltas` stored on the model by
    an earlier call, which goes wrong as soon as another request runs in between, or when new images follow a cached
    part; here they are computed from the whole prompt alone.
    """

    layout = PATCH_GRID
    multimodal_positions: bool = True
    video_runs_per_frame: bool = False

    # Qwen2-VL's inputs (a family whose facts differ states its own), and where the vision config keeps the merge side,
    # the temporal patch and the channels (Qwen2-VL's names).
    vision_facts = PATCH_GRID_FACTS
    vision_config_names = PatchGridVisionNames()
    # Each item's patch rows follow the last, `t * h * w` of them per `(t, h, w)` grid row.
    item_shape = staticmethod(lambda facts: grid_rows(facts.pixel_keys[0], facts.per_item_keys[0]))

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # A family (or layout) stating only traits gets the layout they make; one stating its own layout keeps it.
        if "layout" not in vars(cls) and layout_of(cls) in _LAYOUT_OF_TRAITS.values():
            cls.layout = _LAYOUT_OF_TRAITS[(cls.multimodal_positions, cls.video_runs_per_frame)]

    def _grid_and_pixel_keys(self, modality: str) -> tuple[str, str]:
        facts = self._modality_facts(modality)
        return facts.per_item_keys[0], facts.pixel_keys[0]

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list | None:
        """Placeholders of each item: `grid_token_counts` of its grid row; with `video_runs_per_frame`, a video's come
        as one run per frame (its `t` pieces of `h * w / spatial_merge_size**2`, in frame order).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (the grids).
            modality (`str`, *optional*, defaults to `"image"`): `"image"` or `"video"`.

        Returns:
            `list[int]`, `list[list[int]]` (videos run per frame) or `None` (no grids passed)
        """
        grid = model_kwargs.get(self._grid_and_pixel_keys(modality)[0])
        if grid is None:
            return None
        counts = self.grid_token_counts(grid, modality).tolist()
        if modality != "video" or not self.video_runs_per_frame:
            return counts
        frames = grid[:, 0].tolist()
        return [[count // t] * t for count, t in zip(counts, frames, strict=True)]

    def grid_token_counts(self, grid: torch.Tensor, modality: str) -> torch.Tensor:
        """Placeholders of each item's `(t, h, w)` grid row: `t * h * w`, merged `spatial_merge_size**2` to one.

        A layout or family whose runs hold other tokens, or merge otherwise, states its own arithmetic here.

        Args:
            grid (`torch.Tensor`): `(items, 3)` grid rows of `modality`.
            modality (`str`): `"image"` or `"video"`.

        Returns:
            `torch.Tensor`: `(items,)` placeholder counts.
        """
        return grid.prod(-1) // self._grid_cells_per_token()

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise a clear `ValueError` unless the patch rows have the tower's patch shape, one row per patch of every
        grid (the item schema checks that the rows add up to the grids).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): `"image"` or `"video"`.
        """
        grid_key, pixel_key = self._grid_and_pixel_keys(modality)
        grid, pixels = model_kwargs.get(grid_key), model_kwargs.get(pixel_key)
        if pixels is None:
            return
        check_passed_with(model_kwargs, pixel_key, grid_key)
        expected = (int(grid.prod(-1).sum()), *self._pixel_row_shape())
        if not isinstance(pixels, torch.Tensor) or tuple(pixels.shape) != expected:
            shape = tuple(pixels.shape) if isinstance(pixels, torch.Tensor) else type(pixels).__name__
            kind = "flattened patches" if self.vision_config_names.flat_patches else "patches"
            raise ValueError(
                f"`{pixel_key}` has shape {shape} but this model's vision tower takes {kind} of shape "
                f"{expected} for the {grid.shape[0]} {modality}(s) of `{grid_key}` (one row per patch of every "
                f"grid). Preprocess the {modality}s with this model's processor."
            )

    def _grid_cells_per_token(self) -> int:
        # A grid counts patches; `merge_size**2` of them make one placeholder.
        return self.vision_config_names.merge_size_of(self.config.vision_config) ** 2

    def _pixel_row_shape(self) -> tuple[int, ...]:
        # One patch per row of the pixel inputs (flattened, or as a small image: PaddleOCR-VL)
        return self.vision_config_names.patch_shape_of(self.config.vision_config)

    def vision_position_ids(self, input_ids: torch.Tensor, model_kwargs: dict[str, Any]) -> torch.Tensor | None:
        """`(4, batch, seq)` positions of the whole prompt: text positions, then the 3 M-RoPE rows (t, h, w).

        The same rows upstream's generate builds, computed by the model's own `get_rope_index` from the prompt,
        its grids and its mask, never from `rope_deltas` kept on the model.

        Args:
            input_ids (`torch.Tensor`): the whole prompt.
            model_kwargs (`dict[str, Any]`): the call's inputs (grids, mask, token types).

        Returns:
            `torch.Tensor` of shape `(4, batch, seq)`, or `None` without `multimodal_positions` (the decoder's rope is
            1D: transformers' own positions are kept)
        """
        if not self.multimodal_positions:
            return None
        attention_mask = model_kwargs.get("attention_mask")
        if attention_mask is not None and attention_mask.shape[-1] != input_ids.shape[-1]:
            attention_mask = None  # only the new tokens were passed: the mixin then asks for the whole prompt
        if attention_mask is not None:
            text_positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
        else:
            text_positions = torch.arange(input_ids.shape[-1], device=input_ids.device).expand_as(input_ids)

        token_types = model_kwargs.get("mm_token_type_ids")
        if token_types is None:  # what the processor returns: the modality of each placeholder, 0 for text
            token_types = torch.zeros_like(input_ids)
            for modality in self.vision_facts.modalities:  # a placeholder id shared by modalities marks images
                unmarked = (input_ids == modality.placeholder_id(self.config)) & (token_types == 0)
                token_types[unmarked] = MM_TOKEN_TYPES[modality.name]
        grids = {}
        for modality in self.vision_facts.modalities:
            grid_key = modality.per_item_keys[0]
            grids[grid_key] = model_kwargs.get(grid_key)
            missing = grids[grid_key] is None and bool((token_types == MM_TOKEN_TYPES[modality.name]).any())
            given = _positions_of_the_main_model(model_kwargs, input_ids) if missing else None
            if given is not None:
                # transformers' main model handed this assistant its features without the grids (it pops every
                # encoder argument) but with the positions it built from them, for the whole prompt: use them.
                return given
            if missing:
                raise ValueError(
                    f"The prompt has {modality.name} placeholders but no `{grid_key}`: this model's positions depend "
                    f"on every {modality.name}'s grid, also of those already in the cache. Pass the pixel inputs and "
                    f"`{grid_key}` of every {modality.name} of the prompt."
                )
        if all(grid is None for grid in grids.values()):
            mrope = text_positions.unsqueeze(0).expand(3, -1, -1)  # text only: t = h = w = the text position
            rope_deltas = torch.zeros(input_ids.shape[0], 1, dtype=torch.long, device=input_ids.device)
        else:
            # Family extras of the positions (Qwen2.5-VL's `second_per_grid_ts`), passed when the call has them
            handled = {"input_ids", "mm_token_type_ids", "attention_mask", "kwargs", *grids}
            accepted = inspect.signature(self.model.get_rope_index).parameters
            extras = {k: model_kwargs[k] for k in accepted if k not in handled and model_kwargs.get(k) is not None}
            # Upstream's `get_rope_index` fails on a row with no attended token with a bare `torch.cat()` error
            check_every_row_attends(attention_mask, "this model's multimodal positions (`get_rope_index`)")
            mrope, rope_deltas = self.model.get_rope_index(
                input_ids, mm_token_type_ids=token_types, attention_mask=attention_mask, **grids, **extras
            )
        # Written, never read: code that inspects `model.model.rope_deltas` after `generate` sees what upstream's
        # generate would have left there; vlmprep's own positions never depend on it.
        self.model.rope_deltas = rope_deltas
        return torch.cat([text_positions.unsqueeze(0), mrope.to(text_positions.dtype)], dim=0)  # (4, batch, seq)


class TokenGridTextPositionsLayout(PatchGridLayout):
    """A grid counted in placeholders, one pixel row per placeholder, 1D positions (Inkling2, Inkling2-Loop).

    Each row of `pixel_values` is the square of `merge_size x merge_size` patches that becomes one placeholder,
    `(merge_size * patch_size, merge_size * patch_size, channels)` pixels, so an image of grid `(t, h, w)` has
    `t * h * w` rows and as many placeholders.
    """

    # Inkling2's: images only, and its tower's config names the channels `num_channels`.
    vision_facts = replace(PATCH_GRID_FACTS, other_modalities=())
    vision_config_names = PatchGridVisionNames(channels="num_channels")
    layout = Layout(
        "token_grid_text_positions",
        "a (t, h, w) grid of placeholders per image, one pixel square of merged patches each, 1D text positions",
    )
    multimodal_positions = False

    def _grid_cells_per_token(self) -> int:
        return 1

    def _pixel_row_shape(self) -> tuple[int, ...]:
        vision_config = self.config.vision_config
        side = self.vision_config_names.merge_size_of(vision_config) * vision_config.patch_size
        channels = (
            3
            if self.vision_config_names.channels is None
            else getattr(vision_config, self.vision_config_names.channels)
        )
        return (side, side, channels)


def _positions_of_the_main_model(model_kwargs: dict[str, Any], input_ids: torch.Tensor) -> torch.Tensor | None:
    # An assistant called by transformers' own generate gets the main model's `(4, batch, seq)` positions of the
    # whole prompt and its encoder outputs, but not the grids those were built from.
    positions = model_kwargs.get("position_ids")
    if not (isinstance(positions, torch.Tensor) and positions.ndim == 3):
        return None
    if positions.shape[0] != 4 or positions.shape[1:] != input_ids.shape:
        return None
    return positions
