"""The facts a family states about how its images enter the language model."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from transformers import PreTrainedConfig

from .items import ItemSchema

# The names a family's per-token token types take (`VisionFacts.token_type_key` is one of them).
TOKEN_TYPE_KEYS = ("token_type_ids", "mm_token_type_ids", "moe_mm_token_type_ids")


@dataclass(frozen=True)
class AudioPlacement:
    """How a forward handed encoded audio rows builds the input embeddings, for a family whose upstream forward only
    encodes audio itself (the omni families): as upstream's forward does first, so that upstream takes the embeddings.

    The ids are embedded (each placeholder of every modality as `placeholders_embedded_as`, where upstream does so),
    the encoded rows of the `placed` modalities are scattered into their placeholders, and upstream gets those
    embeddings, with the ids where it places the other modalities' rows by them (`keep_input_ids`).

    Args:
        placed (`tuple[str, ...]`): the modalities whose encoded rows are scattered into the embeddings (audio among
            them); the others stay in `mm_encoder_outputs` for upstream.
        keep_input_ids (`bool`, *optional*, defaults to `False`): hand upstream the ids with the embeddings.
        placeholders_embedded_as (`int` or `str`, *optional*): the id every placeholder is embedded as, or the dotted
            config path holding it (`"text_config.pad_token_id"`); `None`: each placeholder as itself.
        per_layer_inputs (`bool`, *optional*, defaults to `False`): also hand upstream the language model's per-layer
            inputs of the embedded ids (Gemma 4, whose config then has `hidden_size_per_layer_input`).
    """

    placed: tuple[str, ...]
    keep_input_ids: bool = False
    placeholders_embedded_as: int | str | None = None
    per_layer_inputs: bool = False

    def embedded_as(self, config: PreTrainedConfig) -> int | None:
        """The id every placeholder is embedded as (`None`: as itself)."""
        value = self.placeholders_embedded_as
        if not isinstance(value, str):
            return value
        for name in value.split("."):
            config = getattr(config, name)
        return int(config)


@dataclass(frozen=True)
class ModalityFacts:
    """How the items of one modality (images, videos, ...) enter the language model.

    The mixin treats every modality alike: spans are the runs of its placeholder, features come from the model's
    `get_<name>_features`, and a forward receives them as `mm_encoder_outputs[name]`.

    Args:
        name (`str`): `"image"`, `"video"`, ...: the key of `mm_encoder_outputs` and of `get_<name>_features`.
        placeholder_attr (`str`): config attribute holding the placeholder token id.
        pixel_keys (`tuple[str, ...]`): the pixel inputs of the modality.
        per_item_keys (`tuple[str, ...]`, *optional*, defaults to `()`):
            other inputs with one entry per item that change its embedding (hashed with the pixels).
        token_type (`int`, *optional*):
            the value of the family's `token_type_key` input at this modality's placeholders, for families whose
            modalities share one placeholder id (GLM-4V's video frames reuse the image placeholder): their spans
            are told apart by it. `None` when the placeholder id alone identifies the modality.
        features_as_list (`bool`, *optional*):
            whether the model reads this modality's `pooler_output` as a list of tensors rather than one tensor;
            `None` follows `VisionFacts.features_as_list` (LLaVA-OneVision reads images as a list, videos not).
        position_keys (`tuple[str, ...]`, *optional*, defaults to `()`):
            inputs with one entry per item that change the positions of the prompt's tokens, not the item's features
            (Qwen2.5-VL's `second_per_grid_ts`, the time between a video's frames): never given to the encoder nor
            hashed with its features; a continuous-batching request carries them, and its shared pages are keyed on
            them.
        output_mask_attr (`str`, *optional*):
            the attribute of the encoder's output holding which of its rows are real (`True`) and which are the
            padding of a batch of items (Gemma 4's audio tower returns `attention_mask`): the padding rows are
            dropped from each item's features, as the model drops them before filling the placeholders. `None`
            when every row of an item's output fills a placeholder.
        kept_rows_key (`str`, *optional*):
            a per-item input (one of `per_item_keys`) marking which of the encoder's rows the model keeps, over every
            item of the call in order (VideoLLaMA3's `video_compression_mask`, which drops frame patches that repeat
            the previous frame): withheld from the encoder, hashed with the item, and applied to each item's rows,
            as the model applies it to the whole call's features before filling the placeholders.
        items (`ItemSchema`, *optional*):
            how the modality's inputs hold its items (`vlmprep.generation.items`); `None`: one entry per item of each
            of `pixel_keys` and `per_item_keys`, counted by the pixel inputs.
        placement (`AudioPlacement`, *optional*):
            for audio whose upstream forward cannot take it encoded: how a forward handed encoded rows places them
            (`vlmprep.models.layouts.audio.EncodedAudioForward`). `None`: upstream's forward takes the modality's
            encoded rows itself.
    """

    name: str
    placeholder_attr: str
    pixel_keys: tuple[str, ...]
    per_item_keys: tuple[str, ...] = ()
    token_type: int | None = None
    features_as_list: bool | None = None
    position_keys: tuple[str, ...] = ()
    output_mask_attr: str | None = None
    kept_rows_key: str | None = None
    items: ItemSchema | None = None
    placement: AudioPlacement | None = None

    def placeholder_id(self, config: PreTrainedConfig) -> int:
        """The placeholder token id of a model config."""
        return getattr(config, self.placeholder_attr)

    @property
    def item_keys(self) -> tuple[str, ...]:
        """Every per-item input of the modality: its pixel inputs, per-item extras and item schema's inputs."""
        schema_keys = () if self.items is None else self.items.keys
        return tuple(dict.fromkeys((*self.pixel_keys, *self.per_item_keys, *schema_keys)))


@dataclass(frozen=True)
class CrossAttention:
    """How a model reads its items through cross-attention layers, where a placeholder only marks where an item's
    cross-attention mask starts rather than receiving rows.

    Args:
        states_key (`str`):
            the forward input that takes the items' features as the states its cross-attention layers read (Llama 3.2
            Vision's `cross_attention_states`). The features of a row's items are concatenated in prompt order into
            one `(rows, positions, dim)` tensor, fed to the first forward of the rest of the prompt only (the
            cross-attention layers cache their keys and values).
        mask (`tuple[str, int]`, *optional*):
            `(input, axis)` of the mask saying which items each token sees, which runs along the sequence on `axis`
            and is cut at each prefill chunk's end as the attention mask is (Llama 3.2 Vision's
            `cross_attention_mask`, `(batch, seq, images, tiles)`: axis 1); the next axis counts a row's item slots
            in prompt order. Each token's row of it is part of its prefix-cache key (`cross_attention_keys`).
        every_forward (`bool`, *optional*, defaults to `False`):
            whether every forward (each prefill chunk, each decoding step) reads the states again rather than the
            layers caching them (IDEFICS's gated cross-attention): every item of the prompt is then prepared whatever
            the cache holds (an encoder-cache hit for those encoded before), and every forward gets the whole plan as
            `mm_encoder_outputs`, from which the family's forward fills `states_key` itself.
    """

    states_key: str
    mask: tuple[str, int] | None = None
    every_forward: bool = False


@dataclass(frozen=True)
class VisionFacts:
    """What the shared mixin needs to know about one VLM family. Behaviour lives in the mixin; families state facts.

    Args:
        placeholder_attr (`str`, *optional*, defaults to `"image_token_id"`):
            config attribute holding the image placeholder token id; `None` for a family of other modalities only
            (InstructBLIP-Video, whose config has no image placeholder): its modalities are `other_modalities` alone,
            and the image facts are unused.
        tokens_per_image_attr (`str`, *optional*):
            dotted config path of the fixed number of placeholder tokens per image (e.g. `"mm_tokens_per_image"`);
            `None` when the family computes it (see `VisionPrepGenerationMixin.item_token_counts`).
        tokens_per_image (`Callable[[PreTrainedConfig], int]`, *optional*):
            the fixed number of placeholder tokens per image computed from the config, when no one attribute holds it
            (a patch grid pixel-shuffled or pooled by the projector); used when `tokens_per_image_attr` is `None`.
        bidirectional (`str`, *optional*):
            `"image"` when each image's placeholder run attends to itself bidirectionally (Gemma3), `"prefix"` when
            the whole `token_type_ids == 0` prefix does (PaliGemma), `"items"` when every token of a
            `block_token_types` type attends to every other one across the prompt, the text between them causal
            (Molmo2): one block per row from the first such token to the last, whose mask upstream builds itself;
            `None` for causal-only families.
        token_type_key (`str`, *optional*, defaults to `"token_type_ids"`):
            the input marking the bidirectional positions; derived from the placeholders when the caller omits it.
        pixel_keys (`tuple[str, ...]`, *optional*, defaults to `("pixel_values",)`):
            per-image pixel inputs, split along their first dimension.
        per_image_keys (`tuple[str, ...]`, *optional*, defaults to `("image_sizes",)`):
            other inputs with one entry per image that change its embedding (hashed with the pixels).
        image_items (`ItemSchema`, *optional*):
            how the image inputs hold the images (`ModalityFacts.items`): inputs split by sizes, old input names a
            processor may still return, the padding a processor adds to batch images together (a larger image's
            size, more crops), dropped so that an image's inputs and hash are the same alone or in any batch.
        fixed_resolution (`bool`, *optional*, defaults to `True`):
            with `pixel_layout="images"`, whether every image must have the vision config's `num_channels x
            image_size x image_size` shape (the other layouts state their own sizes).
        pixel_layout (`str`, *optional*, defaults to `"images"`):
            how the image pixel inputs end in `(C, H, W)`, checked before anything is encoded: `"images"`
            `(num_images, C, H, W)`, checked at `image_size` when `fixed_resolution`; `"crops"` with a crop (or
            sub-image) dimension, `(num_images, crops, C, H, W)`, every crop at `image_size`; `"up_to_size"`
            `(num_images, C, H, W)` of any height and width up to `image_size`, multiples of `patch_size` (Pixtral);
            `"sub_images"` `(batch_size, sub_images, C, H, W)`, every sub-image at `image_size` (Idefics3);
            `"patch_rows"` `(num_tiles, max_patches, C * patch_size**2)`, rows of flattened patches (NaFlex);
            `None` for other layouts (flattened patches on a grid), which the family checks itself.
        features_as_list (`bool`, *optional*, defaults to `False`):
            whether the model reads `pooler_output` as a list of per-image tensors rather than one tensor.
        other_modalities (`tuple[ModalityFacts, ...]`, *optional*, defaults to `()`):
            modalities besides images (e.g. videos), each with its own placeholder and pixel inputs.
        image_token_type (`int`, *optional*):
            `ModalityFacts.token_type` of the images, when another modality shares their placeholder id.
        features_key (`str`, *optional*, defaults to `"pooler_output"`):
            the field of `get_<modality>_features`' output holding the features the model places at the placeholders
            (Fuyu's linear patch embedding returns them as `last_hidden_state`); `None` when the output has only
            deepstack features (Granite 4 Vision): the first deepstack entry's rows then stand for the features, as
            the model counts placeholders against them.
        deepstack_targets (`Callable[[PreTrainedConfig], tuple[int, ...]]`, *optional*):
            given the config, the decoder layer of each deepstack entry, when the model reads `deepstack_features` as
            `(decoder layer, features)` pairs (Granite 4 Vision, Granite Docling) rather than one entry per layer in
            layer order (Qwen3-VL); each forward gets its rows in the same pairs.
        positions_from_cache_length (`bool`, *optional*, defaults to `False`):
            whether `generate` numbers tokens by their place in the cache, left padding included (EXAONE 4.5,
            HyperCLOVAX: their `prepare_inputs_for_generation` drops `position_ids`): a token's KV then depends on its row's padding, which the prefix cache's
            keys must see.
        modality_token_types (`tuple[tuple[str, int], ...]`, *optional*, defaults to `(("image", 1),)`):
            with `bidirectional="image"`, the `token_type_key` value the processor writes at each modality's
            placeholders (Gemma 4: image 1, video 2, audio 3), used to derive the token types a caller left out.
        block_token_types (`tuple[int, ...]`, *optional*, defaults to `(1,)`):
            with `bidirectional="image"` (or `"items"`), the token type values whose runs attend to themselves
            (to each other) bidirectionally
            (Gemma 4: images and video frames, 1 and 2; its audio, 3, is causal).
        features_per_item (`bool`, *optional*, defaults to `False`):
            whether a forward's `pooler_output` is a list of one tensor per item run in its slice, every modality
            (Ovis2.5, which counts the items fed against their start and end tokens), rather than one tensor (or a
            one-tensor list, `features_as_list`) of all the slice's rows.
        cross_attention (`CrossAttention`, *optional*):
            for a model that reads its items through cross-attention layers rather than at placeholders (Llama 3.2
            Vision, IDEFICS), which input takes them, which mask says what each token sees and whether every forward
            reads them; `None` for families whose features fill placeholder runs.
    """

    placeholder_attr: str | None = "image_token_id"
    tokens_per_image_attr: str | None = None
    tokens_per_image: Callable[[PreTrainedConfig], int] | None = None
    bidirectional: Literal["image", "prefix", "items"] | None = None
    token_type_key: str = "token_type_ids"
    pixel_keys: tuple[str, ...] = ("pixel_values",)
    per_image_keys: tuple[str, ...] = ("image_sizes",)
    image_items: ItemSchema | None = None
    fixed_resolution: bool = True
    pixel_layout: Literal["images", "crops", "up_to_size", "sub_images", "patch_rows"] | None = "images"
    features_as_list: bool = False
    other_modalities: tuple[ModalityFacts, ...] = ()
    image_token_type: int | None = None
    features_key: str | None = "pooler_output"
    deepstack_targets: Callable[[PreTrainedConfig], tuple[int, ...]] | None = None
    positions_from_cache_length: bool = False
    modality_token_types: tuple[tuple[str, int], ...] = (("image", 1),)
    block_token_types: tuple[int, ...] = (1,)
    features_per_item: bool = False
    cross_attention: CrossAttention | None = None

    @functools.cached_property
    def modalities(self) -> tuple[ModalityFacts, ...]:
        """Every modality of the family, images first (in that order the mixin numbers their items)."""
        if self.placeholder_attr is None:
            return self.other_modalities
        image = ModalityFacts(
            "image",
            self.placeholder_attr,
            self.pixel_keys,
            self.per_image_keys,
            self.image_token_type,
            items=self.image_items,
        )
        return (image, *self.other_modalities)

    def modality(self, name: str) -> ModalityFacts:
        """The facts of the modality called `name` (`"image"`, `"video"`, ...)."""
        return next(modality for modality in self.modalities if modality.name == name)

    def features_as_list_by_modality(self) -> dict[str, bool]:
        """Per modality, whether the model reads its `pooler_output` as a list of tensors."""
        default = self.features_as_list
        return {m.name: default if m.features_as_list is None else m.features_as_list for m in self.modalities}

    @property
    def generated_token_type(self) -> int:
        """The `token_type_key` value of generated tokens: causal suffix (1) after PaliGemma's prefix, text (0)."""
        return 1 if self.bidirectional == "prefix" else 0

    def deepstack_targets_of(self, config: PreTrainedConfig) -> tuple[int, ...] | None:
        """The decoder layer of each deepstack entry, when the model reads them as `(layer, features)` pairs."""
        return (
            None if self.deepstack_targets is None else tuple(int(layer) for layer in self.deepstack_targets(config))
        )

    def placeholder_id(self, config: PreTrainedConfig) -> int:
        """The image placeholder token id of a model config."""
        return getattr(config, self.placeholder_attr)

    def fixed_tokens_per_image(self, config: PreTrainedConfig) -> int | None:
        """The fixed placeholder count per image read from the config, or `None` when the family has none."""
        if self.tokens_per_image_attr is None:
            return None if self.tokens_per_image is None else int(self.tokens_per_image(config))
        value = config
        for name in self.tokens_per_image_attr.split("."):
            value = getattr(value, name)
        return int(value)
