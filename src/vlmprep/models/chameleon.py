"""Chameleon: a VQ-VAE turns each fixed-resolution image into discrete codes, which become vocabulary tokens.

`get_image_features` encodes an image with the VQ-VAE, maps its codes to their BPE token ids and embeds those with the
decoder's own token embeddings: the features are the embeddings of `image_seq_length` image tokens. So "encode once"
means tokenize once: the VQ-VAE runs once per distinct image, and its embedded tokens are cached like any features (the
encoder-cache identity covers the token embeddings, which live in the same base model as the VQ-VAE).

The processor writes an image as `<racm3:break>`, `image_seq_length` `<image>` placeholders, `<eoss>`; positions are 1D
and attention causal.
"""

from types import SimpleNamespace
from typing import Any

import torch
import transformers

from ..generation import VisionFacts
from ..generation.validation import check_pixel_shapes
from .base import VisionPrepMixin
from .layouts.stated_counts import FIXED_IMAGE


def vq_grid_side(pixels: int, config: transformers.ChameleonConfig) -> int:
    """Codes along one side of an image `pixels` wide: each of the VQ-VAE's downsamplings (one per channel multiplier
    after the first) halves a side, rounding down (a stride-2 convolution after padding one pixel)."""
    for _ in range(len(config.vq_config.channel_multiplier) - 1):
        pixels //= 2
    return pixels


def vq_image_tokens(config: transformers.ChameleonConfig) -> int:
    """Tokens per image of the VQ-VAE's `resolution`: its latent grid.

    The processor states it as `image_seq_length` (1024 for 512 px and `(1, 1, 2, 2, 4)`); the model never reads
    that, so the count comes from the VQ-VAE that makes the codes. Images of another size get another count
    (`ChameleonForConditionalGeneration.item_token_counts`).
    """
    return vq_grid_side(config.vq_config.resolution, config) ** 2


class ChameleonForConditionalGeneration(VisionPrepMixin, transformers.ChameleonForConditionalGeneration):
    """Drop-in `transformers.ChameleonForConditionalGeneration` whose VQ-VAE runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.chameleon import ChameleonForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_chameleon_config
    >>> model = ChameleonForConditionalGeneration(tiny_chameleon_config()).eval()
    >>> model.item_token_counts({"pixel_values": torch.zeros(1, 3, 16, 16)})  # halved twice by the VQ-VAE: 4x4 codes
    16

    ```
    """

    layout = FIXED_IMAGE

    # One fixed-resolution image per entry of `pixel_values` (no vision config: the VQ-VAE checks nothing itself, and
    # a wrong size is caught as a wrong count of feature rows); `pooler_output` is `(images, tokens, dim)`.
    vision_facts = VisionFacts(per_image_keys=(), tokens_per_image=vq_image_tokens)

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | list | None:
        """Tokens per image, from the size of the pixels passed (the VQ-VAE codes any size: `resolution` is only the
        processor's target, and transformers' own tests feed 10 px images to a 512 px config).

        Without pixels (a continuation whose images are all in the passed cache; an assistant model, from which
        transformers pops them) the size is unknown: `None`, each placeholder run one image (the processor puts
        `<racm3:break>` and `<eoss>` around each), which is all such a call needs, since no image is encoded then. A
        run after the cache without pixels is refused by the mixin, which names the missing `pixel_values`.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): Chameleon has images only.

        Returns:
            `int` or `None`
        """
        pixel_values = model_kwargs.get("pixel_values")
        if modality == "image" and pixel_values is None:
            return None
        if modality != "image" or not isinstance(pixel_values, torch.Tensor) or pixel_values.ndim != 4:
            return super().item_token_counts(model_kwargs, modality)
        height, width = pixel_values.shape[-2:]
        return vq_grid_side(height, self.config) * vq_grid_side(width, self.config)

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise a clear `ValueError` when `pixel_values` are not `(images, in_channels, height, width)`.

        The VQ-VAE has no vision config; its `vq_config` states the channels. Any size is coded (the count of codes
        follows it, `item_token_counts`), as upstream's VQ-VAE codes any size.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): Chameleon has images only.
        """
        pixel_values = model_kwargs.get("pixel_values")
        if isinstance(pixel_values, torch.Tensor):
            tower = SimpleNamespace(
                num_channels=self.config.vq_config.in_channels, image_size=tuple(pixel_values.shape[-2:])
            )
            check_pixel_shapes(pixel_values, tower)
