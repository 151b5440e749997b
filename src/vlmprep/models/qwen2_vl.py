"""Qwen2-VL: images and videos as flattened patches on a (t, h, w) grid, and multimodal rope (M-RoPE) positions."""

import inspect
from typing import Any

import torch
import transformers

from ..generation import VisionFacts, VisionPrepGenerationMixin
from ..generation.facts import ModalityFacts

# Placeholder types of `mm_token_type_ids`, as the processors number them (0 is text).
MM_TOKEN_TYPES = {"image": 1, "video": 2}


class PatchGridVisionHooks:
    """Family hooks shared by the Qwen2-VL-like families (listed before `VisionPrepGenerationMixin`).

    Their pixel inputs are flattened patches, `(total_patches, patch_dim)`, with one `(t, h, w)` grid row per item;
    an item has `t * h * w / spatial_merge_size**2` placeholders. Positions are 3D M-RoPE: upstream computes them
    with `rope_deltas` stored on the model by an earlier call, which goes wrong as soon as another request runs in
    between, or when new images follow a cached part; here they are computed from the whole prompt alone.
    """

    def _grid_and_pixel_keys(self, modality: str) -> tuple[str, str]:
        facts = self._modality_facts(modality)
        return facts.per_item_keys[0], facts.pixel_keys[0]

    def image_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list[int] | None:
        """Placeholders of each item: its grid's `t * h * w`, merged `spatial_merge_size**2` to one."""
        grid = model_kwargs.get(self._grid_and_pixel_keys(modality)[0])
        if grid is None:
            return None
        return (grid.prod(-1) // self.config.vision_config.spatial_merge_size**2).tolist()

    def count_images(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """Grid rows; the patch rows and size are checked against them first (a wrong size fails clearly here)."""
        grid_key, pixel_key = self._grid_and_pixel_keys(modality)
        grid, pixels = model_kwargs.get(grid_key), model_kwargs.get(pixel_key)
        if grid is None and pixels is None:
            return None
        if pixels is None:
            # Grids alone: enough for the positions of items the cache already holds (pixels are only needed for
            # items prefill encodes, which the mixin checks).
            return grid.shape[0]
        if grid is None:
            raise ValueError(
                f"`{pixel_key}` was passed without `{grid_key}`. Pass both, as this model's processor returns them."
            )
        vision_config = self.config.vision_config
        patch_dim = vision_config.in_channels * vision_config.temporal_patch_size * vision_config.patch_size**2
        expected = (int(grid.prod(-1).sum()), patch_dim)
        if not isinstance(pixels, torch.Tensor) or tuple(pixels.shape) != expected:
            shape = tuple(pixels.shape) if isinstance(pixels, torch.Tensor) else type(pixels).__name__
            raise ValueError(
                f"`{pixel_key}` has shape {shape} but this model's vision tower takes flattened patches of shape "
                f"{expected} for the {grid.shape[0]} {modality}(s) of `{grid_key}` (one row per patch of every "
                f"grid). Preprocess the {modality}s with this model's processor."
            )
        return grid.shape[0]

    def select_image_inputs(
        self, model_kwargs: dict[str, Any], indices: list[int], modality: str = "image"
    ) -> dict[str, Any]:
        """The items' patch rows (each item owns `t * h * w` consecutive rows) and grid rows, in that order."""
        grid_key, pixel_key = self._grid_and_pixel_keys(modality)
        grid = model_kwargs[grid_key]
        rows = torch.split(model_kwargs[pixel_key], grid.prod(-1).tolist())  # per item: (t * h * w, patch_dim)
        return {pixel_key: torch.cat([rows[index] for index in indices]), grid_key: grid[indices]}

    def vision_position_ids(self, input_ids: torch.Tensor, model_kwargs: dict[str, Any]) -> torch.Tensor:
        """`(4, batch, seq)` positions of the whole prompt: text positions, then the 3 M-RoPE rows (t, h, w).

        The same rows upstream's generate builds, computed by the model's own `get_rope_index` from the prompt,
        its grids and its mask, never from `rope_deltas` kept on the model.
        """
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
            if grids[grid_key] is None and bool((token_types == MM_TOKEN_TYPES[modality.name]).any()):
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
            mrope, rope_deltas = self.model.get_rope_index(
                input_ids, mm_token_type_ids=token_types, attention_mask=attention_mask, **grids, **extras
            )
        # Written, never read: code that inspects `model.model.rope_deltas` after `generate` sees what upstream's
        # generate would have left there; vlmprep's own positions never depend on it.
        self.model.rope_deltas = rope_deltas
        return torch.cat([text_positions.unsqueeze(0), mrope.to(text_positions.dtype)], dim=0)  # (4, batch, seq)


# Images and videos: `pixel_values` / `pixel_values_videos` rows with their grids; positions from the token types.
QWEN2_VL_FACTS = VisionFacts(
    token_type_key="mm_token_type_ids",
    per_image_keys=("image_grid_thw",),
    fixed_resolution=False,
    features_as_list=True,
    other_modalities=(ModalityFacts("video", "video_token_id", ("pixel_values_videos",), ("video_grid_thw",)),),
)


class Qwen2VLForConditionalGeneration(
    PatchGridVisionHooks, VisionPrepGenerationMixin, transformers.Qwen2VLForConditionalGeneration
):
    """Drop-in `transformers.Qwen2VLForConditionalGeneration` whose vision tower runs once, in input preparation.

    Images and videos are encoded once each, only when prefill needs them; positions come from the prompt alone, so
    a cached conversation can get new images and requests can interleave.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.qwen2_vl import Qwen2VLForConditionalGeneration
    >>> text = {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    >>> text.update(bos_token_id=2, eos_token_id=1)
    >>> text["rope_parameters"] = {"rope_type": "default", "mrope_section": [2, 3, 3]}
    >>> vision = {"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "patch_size": 4}
    >>> config = transformers.Qwen2VLConfig(text_config=text, vision_config=vision)
    >>> model = Qwen2VLForConditionalGeneration(config).eval()
    >>> model.image_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    vision_facts = QWEN2_VL_FACTS
