"""LLaVA-NeXT: "anyres" images, whose placeholder count depends on each image's size and the grid pinpoints."""

from typing import Any

import torch
import transformers
from transformers import PreTrainedConfig
from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

from ..generation import VisionFacts, VisionPrepGenerationMixin


class AnyresImages:
    """Family hooks shared by LLaVA-NeXT and LLaVA-NeXT-Video: "anyres" images, counted by upstream's own packing."""

    # `pixel_values` has a crop dimension, `(num_images, crops, C, H, W)`, every crop at `image_size`; the model
    # concatenates `pooler_output`, a list of per-image tensors (base crop, unpadded grid, newlines).
    vision_facts = VisionFacts(fixed_resolution=False, pixel_layout="crops", features_as_list=True)

    def image_token_counts(self, model_kwargs: dict[str, Any]) -> list[int] | None:
        """Placeholders per image: the rows upstream's own `pack_image_features` makes from its `image_sizes`."""
        image_sizes = model_kwargs.get("image_sizes")
        if image_sizes is None:
            return None
        strategy = model_kwargs.get("vision_feature_select_strategy") or self.config.vision_feature_select_strategy
        dummies = [dummy_crop_features(self.config, size, crop_tokens(self.model, strategy)) for size in image_sizes]
        packed, _ = self.model.pack_image_features(
            dummies, image_sizes, vision_feature_select_strategy=strategy, image_newline=torch.zeros(1)
        )
        return [int(features.shape[0]) for features in packed]

    def select_image_inputs(self, model_kwargs: dict[str, Any], indices: list[int]) -> dict[str, Any]:
        """The images' pixels and sizes, without the padding crops a batch added (so hashes do not depend on it)."""
        return trim_padding_crops(self.config, super().select_image_inputs(model_kwargs, indices))


class LlavaNextForConditionalGeneration(
    AnyresImages, VisionPrepGenerationMixin, transformers.LlavaNextForConditionalGeneration
):
    """Drop-in `transformers.LlavaNextForConditionalGeneration` whose vision tower runs once, in input preparation.

    `pixel_values` is `(num_images, num_crops, channels, height, width)` and `image_sizes` `(num_images, 2)`; an
    image's placeholder count follows from its size, the grid pinpoints and the unpadding.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.llava_next import LlavaNextForConditionalGeneration
    >>> config = transformers.LlavaNextConfig(
    ...     text_config={"model_type": "llama", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1},
    ...     vision_config={"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
    ...                    "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 8, "patch_size": 4},
    ...     image_grid_pinpoints=[[8, 16], [16, 8]], image_token_index=122,
    ... )
    >>> model = LlavaNextForConditionalGeneration(config).eval()
    >>> model.image_token_counts({"image_sizes": torch.tensor([[8, 13], [13, 8]])})
    [14, 16]

    ```
    """


def crop_tokens(model: torch.nn.Module, strategy: str | None) -> int:
    """Feature rows of one crop: the tokens the vision tower emits (CLIP's include CLS), less CLS for `"default"`.

    Args:
        model (`torch.nn.Module`): the inner model (`model.model`), with its `vision_tower`.
        strategy (`str`, *optional*): the vision feature select strategy (`"default"` drops the first token).

    Returns:
        `int`
    """
    vision_config = model.config.vision_config
    patches = (vision_config.image_size // vision_config.patch_size) ** 2
    emitted = getattr(getattr(model.vision_tower, "embeddings", None), "num_positions", patches)
    return emitted - (1 if strategy == "default" else 0)


def dummy_crop_features(
    config: PreTrainedConfig, image_size: torch.Tensor, tokens_per_crop: int, with_grid: bool = True
) -> torch.Tensor:
    """1-channel stand-in for one image's projected crop features, to count what `pack_image_features` keeps.

    Running upstream's packing itself on it (rather than re-deriving its unpadding arithmetic) keeps the count exact,
    whatever the family's packing does (LLaVA-NeXT unpads the grid; LLaVA-OneVision also downsamples big grids).

    Args:
        config (`PreTrainedConfig`): the model config (grid pinpoints, vision image size).
        image_size (`torch.Tensor`): the image's original `(height, width)`.
        tokens_per_crop (`int`): feature rows of one crop.
        with_grid (`bool`, *optional*, defaults to `True`): whether the image gets its anyres grid, or only the base crop.

    Returns:
        `torch.Tensor` of shape `(num_crops, tokens_per_crop, 1)`
    """
    crops = image_size_to_num_patches(image_size, config.image_grid_pinpoints, config.vision_config.image_size)
    return torch.zeros(crops if with_grid else 1, tokens_per_crop, 1)


def trim_padding_crops(
    config: PreTrainedConfig, image_inputs: dict[str, Any], with_grid: list[bool] | None = None
) -> dict[str, Any]:
    """Drop the trailing all-padding crops of a `(num_images, max_crops, C, H, W)` selection of images.

    A processor pads every image's crops to the batch's largest count; the model reads only an image's own crops, so
    the padding only makes one image's inputs (and hash) depend on the other images it was batched with.

    Args:
        config (`PreTrainedConfig`): the model config.
        image_inputs (`dict[str, Any]`): the selected `pixel_values` and `image_sizes`.
        with_grid (`list[bool]`, *optional*): per selected image, whether it uses its grid crops (default: all do).

    Returns:
        `dict[str, Any]`
    """
    pixel_values, image_sizes = image_inputs.get("pixel_values"), image_inputs.get("image_sizes")
    if not isinstance(pixel_values, torch.Tensor) or pixel_values.ndim != 5 or image_sizes is None:
        return image_inputs
    with_grid = with_grid if with_grid is not None else [True] * len(image_sizes)
    crops = [
        image_size_to_num_patches(size, config.image_grid_pinpoints, config.vision_config.image_size) if grid else 1
        for size, grid in zip(image_sizes, with_grid, strict=True)
    ]
    return {**image_inputs, "pixel_values": pixel_values[:, : max(crops)]}  # (images, crops, C, H, W)
