"""Llama 3.2 Vision (mllama): images reach the decoder through cross-attention layers, not placeholder rows.

The processor writes one `<|image|>` token per image, which marks only where that image's rows of
`cross_attention_mask` `(batch, seq, images, tiles)` start. `pixel_values` are `(batch, images, tiles, C, H, W)` with
one `aspect_ratio_ids` `(batch, images)` and `aspect_ratio_mask` `(batch, images, tiles)` entry per image; an image's
features are its tiles' patches after the tower and projector, `(tiles * patches, hidden)`, and the decoder reads the
images of a row as one sequence of cross-attention states (`VisionFacts.cross_attention`).
"""

from __future__ import annotations

from typing import Any

import torch
import transformers
from transformers.modeling_outputs import BaseModelOutputWithPooling

from ..generation import VisionFacts
from ..generation.facts import CrossAttention
from ..generation.items import ItemSchema, batched
from ..generation.spans import Block
from ..generation.validation import check_pixel_dims
from .base import VisionPrepMixin
from .layouts.stated_counts import CROSS_ATTENDED_TILES

# The per-image inputs, `(batch, images, ...)`: the first two axes count the images (one row's slots after another).
_PER_IMAGE_KEYS = ("pixel_values", "aspect_ratio_ids", "aspect_ratio_mask")


class MllamaForConditionalGeneration(VisionPrepMixin, transformers.MllamaForConditionalGeneration):
    """Drop-in `transformers.MllamaForConditionalGeneration` whose vision tower and projector run once per distinct
    image, in input preparation; the first forward gets `cross_attention_states` instead of `pixel_values`.

    Example:

    ```python
    >>> from vlmprep import MllamaForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_mllama_config
    >>> model = MllamaForConditionalGeneration(tiny_mllama_config()).eval()

    ```
    """

    layout = CROSS_ATTENDED_TILES
    vision_facts = VisionFacts(
        placeholder_attr="image_token_id",
        tokens_per_image=lambda config: 1,  # one `<|image|>` per image, whatever its tiles
        pixel_keys=("pixel_values",),
        per_image_keys=("aspect_ratio_ids", "aspect_ratio_mask"),
        image_items=ItemSchema(tuple(batched(key, item_axes=2) for key in _PER_IMAGE_KEYS)),
        pixel_layout=None,  # checked by `check_pixel_inputs`
        cross_attention=CrossAttention("cross_attention_states", mask=("cross_attention_mask", 1)),
    )

    def encode_image_items(
        self,
        pixel_values: torch.Tensor,
        aspect_ratio_ids: torch.Tensor,
        aspect_ratio_mask: torch.Tensor,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        """The cross-attention states of each image: upstream's tower and projector, as its forward runs them.

        Not `get_image_features`: transformers' class has none, and a drop-in adding it would answer `hasattr` unlike
        transformers (`vlmprep.generation.encoding.encoder_name`).

        Args:
            pixel_values (`torch.Tensor` of shape `(1, images, tiles, channels, height, width)`): the images' tiles.
            aspect_ratio_ids (`torch.Tensor` of shape `(1, images)`): each image's tile arrangement.
            aspect_ratio_mask (`torch.Tensor` of shape `(1, images, tiles)`): each image's real tiles.

        Returns:
            `BaseModelOutputWithPooling`: `pooler_output` of shape `(images, tiles * patches, hidden)`.
        """
        model = self.model
        vision_outputs = model.vision_model(
            pixel_values=pixel_values, aspect_ratio_ids=aspect_ratio_ids, aspect_ratio_mask=aspect_ratio_mask
        )
        states = model.multi_modal_projector(vision_outputs.last_hidden_state)  # (1, images, tiles, patches, hidden)
        states = states.reshape(pixel_values.shape[1], -1, model.hidden_size)  # (images, tiles * patches, hidden)
        return BaseModelOutputWithPooling(last_hidden_state=states, pooler_output=states)

    def item_state_layers(self) -> tuple[int, ...]:
        """The cross-attention layers, whose cache holds the images' projected states (`FamilyHooks.item_state_layers`).

        Returns:
            `tuple[int, ...]`
        """
        return tuple(self.config.get_text_config(decoder=True).cross_attention_layers)

    def cache_holds_item_states(self, cache, cached_items: int = 0) -> bool:
        """Whether the cross-attention layers of `cache` hold image states, checked against the images the cache
        holds: each image fills `max_num_tiles * num_patches` positions (a cache cropped to a token count cuts them).

        Args:
            cache (`Cache`, *optional*): the call's cache.
            cached_items (`int`, *optional*, defaults to `0`): the most images a row has before the resume point.

        Returns:
            `bool`: `False` when the layers are empty (a restored prefix: every image is fed again).
        """
        if cache is None or not super().cache_holds_item_states(cache, cached_items):
            return False
        per_image = self.config.vision_config.max_num_tiles * self.model.vision_model.num_patches
        held = {cache.layers[index].keys.shape[-2] for index in self.item_state_layers() if index < len(cache.layers)}
        if held != {cached_items * per_image}:
            raise ValueError(
                f"The cache's cross-attention layers hold {sorted(held)} image positions, but the {cached_items} "
                f"image(s) before the cache's end fill {cached_items * per_image} ({per_image} each): the cache was "
                "cropped to a token count or made for another prompt. Pass the cache `generate` returned for this "
                "conversation, or none."
            )
        return True

    def whole_item_blocks(self, spans: list) -> list[Block]:
        """In a row with text before its first image, the text up to the end of its last image: one forward holds
        it whole.

        That text attends to no image by the mask, so upstream's cross-attention lets it attend to every image's
        states alike (a fully masked row of `cross_attention_mask` becomes a row of zeros): its keys and values depend
        on every image of the row. A cache of its start is then right only for the same images, and a prompt adding
        one resumes from the block's start. A row starting with its first image (the processor puts leading
        `<|image|>` tokens before the BOS token) has no such text, and no block.

        Args:
            spans (`list[ItemSpan]`): the prompt's item spans (one `<|image|>` token per image).

        Returns:
            `list[Block]`
        """
        first_start, last_end = {}, {}
        for span in spans:
            first_start[span.row] = min(first_start.get(span.row, span.start), span.start)
            last_end[span.row] = max(last_end.get(span.row, span.end), span.end)
        return [Block(row, 0, last_end[row]) for row in first_start if first_start[row] > 0]

    def continuous_batching_refusal(self) -> str:
        """Why transformers' continuous-batching engine does not run Llama 3.2 Vision (`vlmprep.batching.support`).

        Returns:
            `str`
        """
        return (
            "its decoder reads images through cross-attention layers, which cache the images' states (keys and values "
            "per image position, not per token), and transformers' paged cache keeps one key and value per token of "
            "every layer: it has no place for them."
        )

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise a clear `ValueError` when the image inputs do not come together, or hold padding image slots.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): the modality (images only).
        """
        pixel_values = model_kwargs.get("pixel_values")
        if pixel_values is None:
            return
        missing = [key for key in _PER_IMAGE_KEYS[1:] if model_kwargs.get(key) is None]
        if missing:
            raise ValueError(
                f"`pixel_values` were passed without {', '.join(f'`{key}`' for key in missing)}: pass every output of "
                "the Mllama processor (`pixel_values`, `aspect_ratio_ids`, `aspect_ratio_mask`, `cross_attention_mask`)."
            )
        vision_config = self.config.vision_config
        check_pixel_dims(pixel_values, vision_config, ("batch_size", "images", "max_num_tiles"))
        if pixel_values.shape[2] != vision_config.max_num_tiles:
            raise ValueError(
                f"`pixel_values` holds {pixel_values.shape[2]} tiles per image but this model's vision tower takes "
                f"{vision_config.max_num_tiles} (`max_num_tiles`, padded with zero tiles): preprocess the images with "
                "this model's image processor."
            )
        if bool((model_kwargs["aspect_ratio_ids"] == 0).any()):
            # Upstream encodes the padding slots too, and text before a row's first image attends to their states
            raise ValueError(
                "`aspect_ratio_ids` marks padding image slots (id 0): the rows of this batch hold different numbers "
                "of images. Pass one row per call, or the same number of images in every row."
            )
