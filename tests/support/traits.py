"""What tests select families by, derived from the registry: each family's drop-in class, its facts and layout, its
tiny config and its case. No test holds a list of family names: it takes `families_with(trait, ...)`, so a family
added to the registry runs every test its traits call for, and a trait that changes moves the family with it.

A trait is a function of a family's name (a key of `FAMILY_CASES`) returning a bool; `families_with` keeps the
registered families for which every given trait holds:

>>> from support.traits import families_with, takes
>>> "gemma4" in families_with(takes("audio"))
True
"""

from __future__ import annotations

import functools
import inspect
import re
import types
from collections.abc import Callable

import torch
from transformers import PreTrainedConfig, PreTrainedModel
from transformers.cache_utils import DYNAMIC_LAYER_TYPE_MAPPING, LinearAttentionCacheLayerMixin

from support.registry import FAMILY_CASES
from vlmprep.generation.assisted import recurrent_layer_types
from vlmprep.generation.batch_statistics import BATCH_NORM_LAYERS
from vlmprep.generation.encoding import encoding_module
from vlmprep.generation.facts import ModalityFacts, VisionFacts
from vlmprep.models.layouts import layout_of
from vlmprep.models.registry import drop_in_class_of

Trait = Callable[[str], bool]

# Decoder layer types transformers' paged cache (the continuous-batching engine's) holds
PAGED_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})
# Decoder attributes the paged cache reads once for every layer (`vlmprep.batching.support`)
PAGED_GLOBAL_ATTRIBUTES = frozenset({"head_dim", "num_key_value_heads", "num_attention_heads", "hidden_size"})


def families_with(*traits: Trait) -> list[str]:
    """The registered families for which every trait holds, sorted (every registered family without a trait).

    Args:
        *traits (`Callable[[str], bool]`): traits of a family's name.

    Returns:
        `list[str]`: model types, keys of `FAMILY_CASES`.
    """
    return sorted(family for family in FAMILY_CASES if all(trait(family) for trait in traits))


# -- What a family is made of: its class, facts, layout and tiny config ----------------------------------------------


@functools.cache
def drop_in(family: str) -> type[PreTrainedModel]:
    """The family's drop-in class (the registry's)."""
    return drop_in_class_of(family)


def facts(family: str) -> VisionFacts:
    """The drop-in's `vision_facts`."""
    return drop_in(family).vision_facts


def modality(family: str, name: str) -> ModalityFacts:
    """The facts of one of the family's modalities (`"image"`, `"video"`, `"audio"`)."""
    return facts(family).modality(name)


def layout_name(family: str) -> str:
    """The name of the drop-in's layout (docs/families.md's *Layout* column)."""
    return layout_of(drop_in(family)).name


@functools.cache
def tiny_config(family: str) -> PreTrainedConfig:
    """The family's tiny config, built once: read it, never change it (`FamilyCase.make_config` gives a fresh one)."""
    return FAMILY_CASES[family].make_config()


def decoder_layer_types(family: str) -> frozenset[str]:
    """The layer types of the tiny config's decoder (empty where the config states none: every layer attends)."""
    return frozenset(getattr(tiny_config(family).get_text_config(decoder=True), "layer_types", None) or ())


def rope_index_owner(drop_in_class: type) -> type | None:
    """The transformers base model class whose `get_rope_index` builds the family's multimodal positions, if any."""
    upstream = next(klass for klass in drop_in_class.__mro__ if klass.__module__.startswith("transformers.models."))
    base = getattr(inspect.getmodule(upstream), upstream.__name__.replace("ForConditionalGeneration", "Model"), None)
    return base if base is not None and hasattr(base, "get_rope_index") else None


# -- Traits -----------------------------------------------------------------------------------------------------------


def takes(modality_name: str) -> Trait:
    """The trait: the drop-in takes items of this modality (`"image"`, `"video"`, `"audio"`)."""

    def takes_modality(family: str) -> bool:
        return modality_name in {m.name for m in facts(family).modalities}

    return takes_modality


def has_layout(*names: str) -> Trait:
    """The trait: the drop-in's layout is one of these."""

    def of_layout(family: str) -> bool:
        return layout_name(family) in names

    return of_layout


def not_(trait: Trait) -> Trait:
    """The trait that holds where `trait` does not."""
    return lambda family: not trait(family)


def sampled(sample: str) -> Trait:
    """The trait: the family's case names this sample (`FamilyCase.samples`), a few families that stand in for all
    where a test runs a representative few."""

    def in_sample(family: str) -> bool:
        return sample in FAMILY_CASES[family].samples

    return in_sample


def images_as_grids(family: str) -> bool:
    """Images as flattened patch rows indexed by `image_grid_thw` (Qwen-VL, GLM-4V)."""
    return takes("image")(family) and "image_grid_thw" in (
        *modality(family, "image").pixel_keys,
        *modality(family, "image").per_item_keys,
    )


def is_encoder_decoder(family: str) -> bool:
    """Items are in an encoder's prompt and the decoder cross-attends (Florence-2, T5Gemma 2): the answer is the
    decoder's, no continuation of the prompt."""
    return bool(drop_in(family).config_class.is_encoder_decoder)  # the config class's: aliases have no case


def attends_bidirectionally(family: str) -> bool:
    """Some tokens attend both ways: each image block (Gemma 3), or the whole prefix (PaliGemma), by token types."""
    return bool(facts(family).bidirectional)


def has_multimodal_rope(family: str) -> bool:
    """Positions from upstream's `get_rope_index` over the whole prompt (Qwen-VL, GLM-4V, ...)."""
    return rope_index_owner(drop_in(family)) is not None


def videos_behind_image_placeholders(family: str) -> bool:
    """A video's frames are image placeholders, told apart by the token types (GLM's prompts): so, as upstream, one
    forward holds images or a video."""
    if not (takes("video")(family) and takes("image")(family)):
        return False
    config = tiny_config(family)
    return modality(family, "video").placeholder_id(config) == modality(family, "image").placeholder_id(config)


def videos_told_by_token_types(family: str) -> bool:
    """Videos have placeholders of their own and `mm_token_type_ids` tell them from images (Qwen-VL's prompts)."""
    return (
        takes("video")(family)
        and not videos_behind_image_placeholders(family)
        and facts(family).token_type_key == "mm_token_type_ids"
    )


def rope_index_reads_token_types(family: str) -> bool:
    """Upstream's `get_rope_index` places images and videos by `mm_token_type_ids` (the drop-in derives them where
    left out)."""
    owner = rope_index_owner(drop_in(family))
    return owner is not None and "mm_token_type_ids" in inspect.signature(owner.get_rope_index).parameters


def qwen_like_prompts(family: str) -> bool:
    """Qwen-VL's prompts: images as patch rows indexed by grids, multimodal positions from `get_rope_index` read with
    `mm_token_type_ids`, which also tell the videos (placeholders of their own) from images; upstream keeps the rope
    deltas of the last request on the model, the drop-in computes positions from the prompt alone."""
    return images_as_grids(family) and videos_told_by_token_types(family) and rope_index_reads_token_types(family)


def videos_as_one_run(family: str) -> bool:
    """A video is one placeholder run, its frames' features split from one tower run (LLaVA-OneVision's,
    LLaVA-NeXT-Video's and Video-LLaVA's prompts)."""
    return takes("video")(family) and has_layout("vision_patches", "anyres_crops", "anyres_crops_per_sample")(family)


def compressed_videos(family: str) -> bool:
    """A video gives one run per frame of the rows its compression mask keeps, some frames shorter (VideoLLaMA3)."""
    return takes("video")(family) and has_layout("merge_sized_grid")(family)


def images_and_videos_in_one_prompt(family: str) -> bool:
    """A prompt may hold images and videos together, each with placeholders of its own (told apart by id or token
    type) that the tests here write: the LLaVA-video, Qwen-like and compressed-video prompts."""
    return videos_as_one_run(family) or qwen_like_prompts(family) or compressed_videos(family)


def state_layer_types(family: str) -> list[str]:
    """The decoder's layer types whose cache layer keeps a state besides keys and values (a recurrent state or a
    convolution's window: transformers' linear-attention cache layers), sorted."""
    types = decoder_layer_types(family)
    return sorted(
        t for t in types if issubclass(DYNAMIC_LAYER_TYPE_MAPPING.get(t, object), LinearAttentionCacheLayerMixin)
    )


def has_state_layers(family: str) -> bool:
    """A hybrid decoder: some layers keep a state besides keys and values (Gated DeltaNet, Mamba-2, KDA, convolutions)."""
    return bool(state_layer_types(family))


def has_recurrent_state(family: str) -> bool:
    """Some decoder layer keeps a recurrent state, which only moves forward (Gated DeltaNet, Mamba-2, KDA)."""
    return bool(recurrent_layer_types(tiny_config(family)))


def has_convolution_state_only(family: str) -> bool:
    """The decoder's state layers keep only convolution windows, which `crop` cuts back (LFM2, Inkling)."""
    return has_state_layers(family) and not has_recurrent_state(family)


def has_sliding_window_layers(family: str) -> bool:
    """Some decoder layers attend over a sliding window, their cache layers keeping only the window (Gemma 3, Inkling's
    `hybrid_sliding` layers, ...)."""
    return any("sliding" in layer_type for layer_type in decoder_layer_types(family))


def loops_decoder_layers(family: str) -> bool:
    """Some decoder layers run several passes per forward, each with a cache layer of its own (Inkling2-Loop): the
    prefix store, which restores the layers the config builds, is not used (with a warning)."""
    return (getattr(tiny_config(family).get_text_config(decoder=True), "loop_num_passes", None) or 1) > 1


def pins_its_prompt(family: str) -> bool:
    """The decoder's reference sliding-window layers pin the prompt they were prefilled with (Unlimited-OCR): a stored
    prefix cannot be resumed exactly, so the prefix store is not used (tests/scenarios/test_pinned_prompt_cache.py)."""
    return "reference_sliding_attention" in decoder_layer_types(family)


def has_sparse_indexer(family: str) -> bool:
    """Some decoder layer picks the keys it attends to with an indexer of its own, whose heads the config sizes
    (indexed attention: GLM-5-Next, Mistral Large 4, HY V4 VL, ...; MiniMax M3's sparse blocks)."""
    text_config = tiny_config(family).get_text_config(decoder=True)
    return any(getattr(text_config, name, None) for name in ("index_n_heads", "indexer_n_heads"))


def positions_from_cache_length(family: str) -> bool:
    """Decoder positions are numbered by place in the cache, left padding included (the facts'
    `positions_from_cache_length`: EXAONE 4.5, HyperCLOVAX)."""
    return facts(family).positions_from_cache_length


def padding_changes_cached_kv(family: str) -> bool:
    """A left-padded row's KV differs from the unpadded row's although the decoder reads `position_ids` (the hook
    `padding_changes_cached_kv`, asked of the tiny config: Llama 4's NoPE layers scale queries by place in the cache)."""
    return drop_in(family).padding_changes_cached_kv(types.SimpleNamespace(config=tiny_config(family)))


def pads_images_to_batch(family: str) -> bool:
    """The processor pads images to batch them, to the largest size (Pixtral's `up_to_size`) or to the most crops
    (any-res `crops`): the drop-in unpads a selected image's inputs (`ItemSchema.unpad`)."""
    return takes("image")(family) and facts(family).pixel_layout in ("up_to_size", "crops")


def forward_takes(parameter: str) -> Trait:
    """The trait: the drop-in's forward takes this parameter (upstream's signature)."""

    def takes_parameter(family: str) -> bool:
        return parameter in inspect.signature(drop_in(family).forward).parameters

    return takes_parameter


def has_deepstack(family: str) -> bool:
    """The vision encoder returns deepstack features that the decoder adds after its first layers: the config names
    their layers (Granite 4 Vision's `deepstack_layer_map`, the vision config's `deepstack_visual_indexes` of
    Qwen3-VL and Granite Docling)."""
    config = tiny_config(family)
    vision_config = getattr(config, "vision_config", None)
    return bool(
        getattr(config, "deepstack_layer_map", None) or getattr(vision_config, "deepstack_visual_indexes", None)
    )


def deepstack_as_layer_pairs(family: str) -> bool:
    """Deepstack features as `(decoder layer, features)` pairs, placed by the facts' `deepstack_targets`."""
    return facts(family).deepstack_targets is not None


# -- The continuous-batching engine ------------------------------------------------------------------------------------


def engine_refusal(family: str) -> str | None:
    """Words of the error with which transformers' continuous-batching engine refuses the family, for text requests
    too (a regular expression for `pytest.raises(match=...)`), or `None` where it runs the family.

    Read from what the family is: a refusal its class states (`continuous_batching_refusal`), a bidirectional prefix,
    decoder layers or attributes that the paged cache does not hold (it keeps full and sliding-window attention layers
    of one shape, with `num_key_value_heads` heads), or a per-token input the engine does not pass to its steps.
    """
    cls = drop_in(family)
    if "continuous_batching_refusal" in dir(cls):
        return re.escape(cls.continuous_batching_refusal(None)[:40])
    if is_encoder_decoder(family):
        return "is an encoder-decoder"
    if facts(family).bidirectional == "prefix":
        return "attends bidirectionally over its whole prefix"
    other_layers = sorted(decoder_layer_types(family) - PAGED_LAYER_TYPES)
    if other_layers:
        return re.escape(f"{other_layers} layers, which transformers' paged cache does not hold")
    text_config = tiny_config(family).get_text_config()
    per_layer = sorted(set(getattr(text_config, "per_layer_attributes", None) or ()) & PAGED_GLOBAL_ATTRIBUTES)
    if per_layer:
        return re.escape(f"layers differ in {per_layer}")
    if forward_takes("moe_mm_token_type_ids")(family):
        return "moe_mm_token_type_ids"
    if getattr(text_config, "kv_lora_rank", None):
        return "latent attention"
    return None


def refused_by_engine(family: str) -> bool:
    """The continuous-batching engine refuses the family, text requests too (`engine_refusal`)."""
    return engine_refusal(family) is not None


# -- Audio -------------------------------------------------------------------------------------------------------------


def audio_input_key(family: str) -> str:
    """The input holding the family's audio clips: log-mel features (`input_features`), waveforms (`input_values`) or
    audio codes (`audio_input_ids`)."""
    return modality(family, "audio").pixel_keys[0]


def audio_mask_key(family: str) -> str | None:
    """The input marking each clip's real frames (or samples), or `None` where the family has none (Dots 3 Note gives
    each chunk's length)."""
    return next((key for key in modality(family, "audio").per_item_keys if key.endswith("mask")), None)


def audio_as(key: str) -> Trait:
    """The trait: the family takes audio clips, as this input with a mask of their real frames (`audio_mask_key`)."""

    def audio_in(family: str) -> bool:
        return takes("audio")(family) and audio_input_key(family) == key and audio_mask_key(family) is not None

    return audio_in


# -- Train mode --------------------------------------------------------------------------------------------------------


@functools.cache
def encodes_with_batch_norm(family: str) -> bool:
    """The family's encoders hold BatchNorm layers (Emu3's VQ-VAE, Nemotron-H Omni's audio tower): in train mode they
    normalize over the items encoded together, which `generate` refuses (`batch_statistics`). Read from the drop-in
    built on the meta device."""
    with torch.device("meta"):
        model = drop_in(family)(tiny_config(family))
    return any(isinstance(module, BATCH_NORM_LAYERS) for module in encoding_module(model).modules())
