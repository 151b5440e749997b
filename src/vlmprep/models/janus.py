"""Janus: a fixed-resolution image is one run of `num_image_tokens` placeholders, a token per SigLIP patch.

The processor writes an image as `<begin_of_image>`, `num_image_tokens` `<image_placeholder>` placeholders,
`<end_of_image>`; `get_image_features` runs the SigLIP tower and the aligner on every patch (`layouts.vision_patches`).
Positions are 1D and attention causal.

Janus's own `generate` stays reachable: it comes after the mixin in the drop-in's bases, so the mixin's `generate`
reaches it, and it hands text generation (`generation_mode="text"`, the default) to transformers' `generate`, whose
hooks are the mixin's. Image generation (`generation_mode="image"`) runs Janus's own loop on a text prompt, with no
image to encode and its own static cache, so vlmprep's prefix cache has nothing to offer there.
"""

from typing import Any

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.vision_patches import VisionPatchesLayout


class JanusForConditionalGeneration(VisionPatchesLayout, VisionPrepMixin, transformers.JanusForConditionalGeneration):
    """Drop-in `transformers.JanusForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep.models.janus import JanusForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_janus_config
    >>> model = JanusForConditionalGeneration(tiny_janus_config()).eval()
    >>> model.item_token_counts({})  # a 16 px image in 4 px patches
    16

    ```
    """

    # `pixel_values` `(images, C, H, W)` at the tower's `image_size`; `pooler_output` `(images, patches, dim)`.
    vision_facts = VisionFacts(per_image_keys=())

    def generate(self, *args: Any, generation_mode: str = "text", **kwargs: Any):
        """`transformers.JanusForConditionalGeneration.generate`: text through the mixin, images through Janus's loop.

        Args:
            generation_mode (`str`, *optional*, defaults to `"text"`):
                `"text"` generates text (images in the prompt encoded once, prefix cache and encoder cache as every
                drop-in); `"image"` generates image tokens with Janus's own loop, which takes no `prefix_cache`.
            args, kwargs: everything Janus's `generate` takes.

        Returns:
            What Janus's `generate` returns.
        """
        if generation_mode != "image":
            return super().generate(*args, generation_mode=generation_mode, **kwargs)
        if kwargs.get("prefix_cache") is not None:
            raise ValueError(
                "`prefix_cache` is not used by Janus's image generation (`generation_mode='image'`), which runs its "
                "own loop with a static cache; pass it only with `generation_mode='text'`."
            )
        kwargs.pop("prefix_cache", None)
        return transformers.JanusForConditionalGeneration.generate(self, *args, generation_mode="image", **kwargs)
