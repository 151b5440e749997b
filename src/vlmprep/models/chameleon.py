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
from .layouts.stated_counts import FixedImageLayout


def vq_image_tokens(config: transformers.ChameleonConfig) -> int:
    """Tokens per image: the VQ-VAE's latent grid, `resolution` halved once per channel multiplier after the first.

    The processor states it as `image_seq_length` (1024 for 512 px and `(1, 1, 2, 2, 4)`); the model never reads
    that, so the count comes from the VQ-VAE that makes the codes.
    """
    vq_config = config.vq_config
    side = vq_config.resolution // 2 ** (len(vq_config.channel_multiplier) - 1)
    return side * side


class ChameleonForConditionalGeneration(
    FixedImageLayout, VisionPrepMixin, transformers.ChameleonForConditionalGeneration
):
    """Drop-in `transformers.ChameleonForConditionalGeneration` whose VQ-VAE runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.chameleon import ChameleonForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_chameleon_config
    >>> model = ChameleonForConditionalGeneration(tiny_chameleon_config()).eval()
    >>> model.item_token_counts({})  # a 16 px image, halved twice by the VQ-VAE: a 4x4 grid of codes
    16

    ```
    """

    # One fixed-resolution image per entry of `pixel_values` (no vision config: the VQ-VAE checks nothing itself, and
    # a wrong size is caught as a wrong count of feature rows); `pooler_output` is `(images, tokens, dim)`.
    vision_facts = VisionFacts(per_image_keys=(), tokens_per_image=vq_image_tokens)

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise a clear `ValueError` when `pixel_values` are not `(images, in_channels, resolution, resolution)`.

        The VQ-VAE has no vision config; its `vq_config` states the channels and the resolution the processor resizes
        to (another size would give another number of codes than the prompt's placeholders).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): Chameleon has images only.
        """
        pixel_values = model_kwargs.get("pixel_values")
        if isinstance(pixel_values, torch.Tensor):
            vq_config = self.config.vq_config
            tower = SimpleNamespace(num_channels=vq_config.in_channels, image_size=vq_config.resolution)
            check_pixel_shapes(pixel_values, tower)
