"""Emu3: a VQ-VAE turns each image into a grid of discrete codes, which become vocabulary tokens, a row at a time.

`get_image_features` encodes the images with the VQ-VAE (at `image_sizes`, cropped out of the batch's padded pixels),
maps each code to its BPE token id, ends every row of the grid with an end-of-line token and embeds the lot with the
decoder's token embeddings. An image of `height x width` pixels is therefore one run of
`(height // f) * (width // f + 1)` placeholders, `f` the VQ-VAE's spatial downsampling; `pooler_output` is a tuple of
per-image tensors. "Encode once" means tokenize once: the VQ-VAE runs once per distinct image.

The VQ-VAE normalizes over the whole padded image the processor makes when it pads a batch's images to the largest,
so an image's codes depend on the padded pixels it came with: those (not a cropped copy) are its inputs and its
content hash, and any canvas that holds the image is valid input. Its features are token
embeddings of the decoder, so the encoder cache keys them on the whole model's weights.

The processor writes an image as `<|image start|>`, its grid size as text, `<|image token|>`, the placeholders,
`<|extra_201|>`, `<|image end|>`; positions are 1D and attention causal.
"""

from typing import Any

import torch
import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.stated_counts import SIZED_IMAGE


def vq_spatial_factor(config: transformers.Emu3Config) -> int:
    """The VQ-VAE's spatial downsampling: 2 per channel multiplier after the first (8 for the released model)."""
    return 2 ** (len(config.vq_config.channel_multiplier) - 1)


class Emu3ForConditionalGeneration(VisionPrepMixin, transformers.Emu3ForConditionalGeneration):
    """Drop-in `transformers.Emu3ForConditionalGeneration` whose VQ-VAE runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.emu3 import Emu3ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_emu3_config
    >>> model = Emu3ForConditionalGeneration(tiny_emu3_config()).eval()
    >>> model.item_token_counts({"image_sizes": torch.tensor([[16, 16], [12, 8]])})  # a row of codes + end of line
    [20, 9]

    ```
    """

    layout = SIZED_IMAGE

    # `pixel_values` `(images, C, H, W)` padded to the batch's largest image, `image_sizes` `(images, 2)`; the
    # features of each image are one tensor of a tuple.
    vision_facts = VisionFacts(pixel_layout=None, features_as_list=True)

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list[int] | None:
        """Placeholders of each image: `(height // f) * (width // f + 1)` from `image_sizes` (an end of line per row).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (`image_sizes`).
            modality (`str`, *optional*, defaults to `"image"`): Emu3 has images only.

        Returns:
            `list[int]`, or `None` without `image_sizes` (each run is then one image).
        """
        image_sizes = model_kwargs.get("image_sizes")
        if image_sizes is None:
            return None
        factor = vq_spatial_factor(self.config)
        return [(int(height) // factor) * (int(width) // factor + 1) for height, width in image_sizes.tolist()]

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise a clear `ValueError` unless `pixel_values` are `(images, in_channels, H, W)` holding every image of
        `image_sizes` (the image processor pads a batch's images to the largest one).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): Emu3 has images only.
        """
        pixel_values = model_kwargs.get("pixel_values")
        if not isinstance(pixel_values, torch.Tensor):
            return
        if self.model.vqmodel.training:
            # BatchNorm in train mode normalizes over the images encoded together: upstream encodes every image of
            # the call at once, the mixin only those the KV cache does not hold, and their codes would differ.
            raise ValueError(
                "Emu3's VQ-VAE is in train mode: its BatchNorm layers then make an image's codes depend on the other "
                "images encoded with it, and `generate` encodes only the images the cache does not hold. Put it in "
                "eval mode (`model.model.vqmodel.eval()`) to generate; training forwards are not affected."
            )
        channels = self.config.vq_config.in_channels
        if pixel_values.ndim != 4 or pixel_values.shape[1] != channels:
            raise ValueError(
                f"`pixel_values` has shape {tuple(pixel_values.shape)} but this model's vision tower takes "
                f"(num_images, {channels}, height, width). Preprocess the images with this model's image processor."
            )
        image_sizes = model_kwargs.get("image_sizes")
        if image_sizes is None:
            raise ValueError("Emu3 needs the `image_sizes` of its `pixel_values`; pass the image processor's output.")
        largest = torch.as_tensor(image_sizes).amax(dim=0).tolist()
        if largest[0] > pixel_values.shape[-2] or largest[1] > pixel_values.shape[-1]:
            raise ValueError(
                f"`pixel_values` are {tuple(pixel_values.shape[-2:])} pixels, smaller than the largest of "
                f"`image_sizes`, {tuple(largest)}. Pass the image processor's `pixel_values` and `image_sizes` of "
                "one batch together."
            )

    def _encoder_cache_identity(self, part: str = "vision") -> tuple[str, ...]:
        # The features are embeddings of the decoder's own token table, which the vision part (the model without its
        # decoder) leaves out: key the encoder cache on every weight.
        return super()._encoder_cache_identity(part="model")
