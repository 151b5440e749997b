"""`FamilyHooks`: the per-family facts that are computed rather than stated, with the defaults most families use.

A family overrides a hook when its facts need code (placeholder counts from image sizes, flattened pixel inputs,
multimodal positions). Every hook has one signature: the call's inputs first, then the modality (`"image"` unless the
family has others, see `VisionFacts.other_modalities`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .facts import ModalityFacts, VisionFacts
from .items import ItemSchema, default_schema
from .validation import check_patch_rows, check_pixel_dims, check_pixel_shapes

# `VisionFacts.pixel_layout` -> the dimensions before `(C, H, W)` of the image pixels, for the layouts checked by
# `check_pixel_dims`.
_LEADING_DIMS = {
    "crops": ("num_images", "crops"),
    "sub_images": ("batch_size", "sub_images"),
    "up_to_size": ("num_images",),
}


class FamilyHooks:
    """The family hooks the generation mixin calls, with their defaults; a drop-in states `vision_facts`.

    Hosts must provide `config` and `vision_facts` (a `VisionFacts`), as every drop-in class does.
    """

    vision_facts: VisionFacts = VisionFacts()
    # Inputs of the language model that the family's forward takes through its keyword arguments without naming them
    # (the Q-Former families: their forward has upstream's parameters and hands the rest to the language model).
    # `generate` inspects the forward's named parameters only; these are taken too (`VisionPrepGenerationMixin`).
    language_model_kwargs: tuple[str, ...] = ()
    # How a layout's inputs hold its items when a modality's facts state no `items` (the patch-grid layouts: grid
    # rows), given the modality's facts; `None`: one entry per item of each input (`default_schema`).
    item_shape: Callable[[ModalityFacts], ItemSchema] | None = None

    def _modality_facts(self, name: str) -> ModalityFacts:
        return self.vision_facts.modality(name)

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | list | None:
        """Placeholder tokens of each item (one count for all, a list per item, or `None`: one item per run).

        An item whose placeholders come in several runs (a video with one run per frame) has a list of its pieces.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (some families read image sizes from them).
            modality (`str`, *optional*, defaults to `"image"`): whose items to count tokens of.

        Returns:
            `int`, `list[int | list[int]]` or `None`
        """
        return self.vision_facts.fixed_tokens_per_image(self.config) if modality == "image" else None

    def prompt_item_token_counts(
        self, input_ids: torch.Tensor, model_kwargs: dict[str, Any], modality: str = "image"
    ) -> int | list | None:
        """`item_token_counts`, for a family whose items' runs are only known from the prompt (the Qwen-Omni thinkers'
        videos interleaved with their audio tracks, each item several runs): by default the inputs alone give them.

        Args:
            input_ids (`torch.Tensor`): the prompt's ids.
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): whose items to count tokens of.

        Returns:
            `int`, `list[int | list[int]]` or `None`
        """
        return self.item_token_counts(model_kwargs, modality=modality)

    def encoding_group_key(self, model_kwargs: dict[str, Any]) -> tuple:
        """What the items of several requests must share, besides the shapes of their inputs, to be encoded in one
        call by the continuous-batching engine: by default nothing. The Qwen3-Omni thinker's clips depend on the
        longest audio window of the call, so only requests with the same one are encoded together.

        Args:
            model_kwargs (`dict[str, Any]`): one request's inputs.

        Returns:
            `tuple`
        """
        return ()

    def item_schema(self, modality: str = "image") -> ItemSchema:
        """How the inputs of `modality` hold its items: the modality's `items`, else the layout's `item_shape`, else
        one entry per item of each input.

        Args:
            modality (`str`, *optional*, defaults to `"image"`): whose items.

        Returns:
            `ItemSchema`
        """
        facts = self._modality_facts(modality)
        if facts.items is not None:
            return facts.items
        if self.item_shape is not None:
            return type(self).item_shape(facts)
        return default_schema(facts.pixel_keys, facts.per_item_keys)

    def count_items(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """How many items of `modality` (images, videos, tiles, ...) the call's inputs hold (`None`: none), by the
        modality's item schema, which checks its inputs against each other first.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): whose items to count.

        Returns:
            `int` or `None`
        """
        return self.item_schema(modality).count(self, model_kwargs)

    def select_item_inputs(
        self, model_kwargs: dict[str, Any], indices: list[int], modality: str = "image"
    ) -> dict[str, Any]:
        """The per-item inputs of the given items of `modality`, in that order, by the modality's item schema.

        Items carry their current input names and no batch padding, so that the tower gets what it takes and an item
        hashes alike in any call.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            indices (`list[int]`): indices among the items of `modality`.
            modality (`str`, *optional*, defaults to `"image"`): whose items.

        Returns:
            `dict[str, Any]`: keyword arguments for the family's `get_image_features` (`get_<modality>_features`).
        """
        return self.item_schema(modality).select(self, model_kwargs, indices)

    def check_item_count(self, model_kwargs: dict[str, Any], spans: list, modality: str = "image") -> None:
        """Raise a clear `ValueError` unless the pixel inputs hold one item per placeholder run of the prompt.

        Families whose items are not what the user passes (Fuyu: an item is one patch) word it their own way.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (with pixel inputs of `modality`).
            spans (`list[ItemSpan]`): the prompt's spans of `modality`.
            modality (`str`, *optional*, defaults to `"image"`): whose items to count.
        """
        num_items = self.count_items(model_kwargs, modality=modality)
        num_runs = len({span.item_index for span in spans})
        if num_items != num_runs:
            raise ValueError(
                f"{num_items} {modality}(s) were passed but the prompt has {num_runs} {modality} placeholder run(s). "
                f"Pass exactly one {modality} per placeholder run, in prompt order (all {modality}s of the "
                "conversation, also those already in the cache), or fix the prompt."
            )

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise a clear `ValueError` when pixel inputs do not fit the vision tower, before anything is encoded.

        The default checks the image pixels by `VisionFacts.pixel_layout` (transformers would fail with a raw shape
        error deep in the tower); families with other layouts (flattened patches on a grid) override this or check
        their inputs in `count_items`.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): whose pixel inputs to check.
        """
        facts = self.vision_facts
        key = self._modality_facts(modality).pixel_keys[0]
        pixel_values = model_kwargs.get(key)
        if modality != "image" or not isinstance(pixel_values, torch.Tensor):
            return
        vision_config = getattr(self.config, "vision_config", None)
        if facts.pixel_layout == "images" and facts.fixed_resolution:
            check_pixel_shapes(pixel_values, vision_config)
        elif facts.pixel_layout == "patch_rows":
            check_patch_rows(pixel_values, vision_config)
        elif facts.pixel_layout in _LEADING_DIMS:
            leading = _LEADING_DIMS[facts.pixel_layout]
            check_pixel_dims(pixel_values, vision_config, leading, key, up_to_size=facts.pixel_layout == "up_to_size")

    def item_independent_encoder_fields(self, modality: str = "image") -> dict[str, Any]:
        """Fields of `mm_encoder_outputs[modality]` that depend on no item, which the model reads in every forward
        that feeds the modality (Ovis2: the embeddings of its visual indicator tokens, `<IMG_START>`, `<IMG_COL>`, ...,
        which replace those tokens' text embeddings wherever images are fed).

        When a family states some, every prefill forward of a prompt holding items of the modality feeds it (with no
        rows where its slice holds no placeholder) and these fields, as one uncached forward of the prompt with its
        pixels does. The default `{}` feeds a modality only to the forwards holding its placeholders.

        Args:
            modality (`str`, *optional*, defaults to `"image"`): whose encoder output.

        Returns:
            `dict[str, Any]`
        """
        return {}

    def whole_item_blocks(self, spans: list) -> list:
        """Blocks around items that one forward must hold whole, though their tokens attend causally: the chunks and
        resume points avoid their inside as they avoid a bidirectional block's.

        Ovis2.5 embeds an item's start and end tokens with learned vision embeddings, and only in a forward that feeds
        that item's features, whose start and end tokens it counts against the items fed: a forward holding part of
        an item's start-to-end tokens gets wrong embeddings or fails. The default `[]`: no such blocks.

        Args:
            spans (`list[ItemSpan]`): the prompt's item spans (positions in the whole sequence).

        Returns:
            `list[Block]`
        """
        return []

    def padding_changes_cached_kv(self) -> bool:
        """Whether a left-padded row's cached keys and values differ from the same row unpadded although the decoder
        reads the `position_ids` it is given (Llama 4's NoPE layers scale queries by each token's place in the cache,
        padding included, and later layers cache what they output): the prefix store then neither looks up nor
        stores a padded row, as for a decoder with recurrent states. The default `False`.

        Returns:
            `bool`
        """
        return False

    def item_state_layers(self) -> tuple[int, ...]:
        """The decoder layers whose cache holds item states rather than per-token keys and values (Llama 3.2 Vision's
        cross-attention layers, which cache the images' projected states): the prefix store keeps none of theirs, and
        a cache restored from it gets the items fed again. The default `()`: every layer caches per token.

        Returns:
            `tuple[int, ...]`
        """
        return ()

    def cache_holds_item_states(self, cache, cached_items: int = 0) -> bool:
        """Whether `cache` holds the item states of the layers of `item_state_layers` (always, without such layers).

        A family may check them against the items before the resume point, and raise where they cannot be theirs.

        Args:
            cache (`Cache`, *optional*): the call's cache.
            cached_items (`int`, *optional*, defaults to `0`): the most items a row has before the resume point.

        Returns:
            `bool`
        """
        layers = self.item_state_layers()
        if not layers or cache is None:
            return True
        held = [cache.layers[index] for index in layers if index < len(cache.layers)]
        return any(getattr(layer, "keys", None) is not None and layer.keys.numel() > 0 for layer in held)

    def block_layer_types(self) -> tuple[str, ...] | None:
        """The decoder layer types on which a bidirectional block's tokens attend to each other; `None`: every layer.

        Where vlmprep builds the attention mask itself (continuous batching), it opens blocks on these layers only.
        Gemma 4 opens them on its sliding layers, and only under `use_bidirectional_attention="vision"`.

        Returns:
            `tuple[str, ...]` or `None`
        """
        return None

    def vision_position_ids(self, input_ids: torch.Tensor, model_kwargs: dict[str, Any]) -> torch.Tensor | None:
        """Position ids of the whole prompt for families with multimodal rope, from the prompt alone.

        The default `None` keeps transformers' 1D positions. A family returning a tensor gets it sliced per prefill
        chunk (last dimension) and extended by one per decoded token.

        Args:
            input_ids (`torch.Tensor`): the whole prompt.
            model_kwargs (`dict[str, Any]`): the call's inputs (pixel inputs still present).

        Returns:
            `torch.Tensor` or `None`
        """
        return None

    def cached_key_shape(self) -> tuple[int, int] | None:
        """`(heads, last dimension)` of the keys this model's attention layers store in a cache, or `None`.

        A caller's cache is checked against it (one made by another model is refused). The default `None` stands
        for each layer's key-value heads and head dimension (from `per_layer_config` where the layers differ, as
        Gemma 4's); a decoder that caches something else in every layer (a compressed latent) says what.

        Returns:
            `tuple[int, int]` or `None`
        """
        return None
