"""Checks of a `generate` call's inputs, each failing with a message that names the problem and the fix.

transformers answers most of these with a raw shape error deep in the forward, or not at all (a cache from another
model is silently used, placeholders without pixels run as text).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedConfig


def check_sequence_input(name: str, value: torch.Tensor | None, batch_size: int, lengths: Sequence[int]) -> None:
    """Raise when a per-token input (`attention_mask`, `token_type_ids`) does not line up with `input_ids`.

    Args:
        name (`str`): the argument's name, for the message.
        value (`torch.Tensor`, *optional*): the input; `None` passes.
        batch_size (`int`): rows of `input_ids`.
        lengths (`Sequence[int]`): accepted sequence lengths (the prompt's, or cache + new tokens).
    """
    if value is None:
        return
    if value.ndim != 2 or value.shape[0] != batch_size or value.shape[1] not in lengths:
        expected = " or ".join(f"({batch_size}, {length})" for length in sorted(set(lengths)))
        raise ValueError(
            f"`{name}` has shape {tuple(value.shape)} but `input_ids` needs {expected}. Pass the `{name}` the "
            "processor returned together with these `input_ids` (same batch and padding)."
        )


def check_companion_input(
    value: torch.Tensor | None,
    name: str,
    expected: tuple[int, ...],
    given_with: str,
    entry: str,
    source: str = "the processor",
    required: bool = True,
) -> None:
    """Raise when an input that describes another one (its mask, lengths or positions) has not one `entry` per part of
    it, as `expected`.

    Args:
        value (`torch.Tensor`, *optional*): the describing input; `None` passes unless `required`.
        name (`str`): its name, for the message.
        expected (`tuple[int, ...]`): the shape it needs.
        given_with (`str`): the name of the input it describes.
        entry (`str`): what it needs, e.g. `"one mask entry per frame"`.
        source (`str`, *optional*, defaults to `"the processor"`): what returns both inputs together.
        required (`bool`, *optional*, defaults to `True`): whether a missing `value` is refused.
    """
    if value is None and not required:
        return
    shape = None if value is None else tuple(value.shape)
    if shape != tuple(expected):
        raise ValueError(
            f"`{name}` has shape {shape} but `{given_with}` needs {entry}, {tuple(expected)}. Pass the `{name}` "
            f"{source} returned with it."
        )


def check_passed_with(model_kwargs: dict, key: str, needed: str, why: str | None = None) -> None:
    """Raise when the input `key` is passed without `needed`, the input that says how to read it.

    Args:
        model_kwargs (`dict`): the call's inputs.
        key (`str`): the input passed.
        needed (`str`): the input it needs beside it.
        why (`str`, *optional*): what `needed` tells, for the message.
    """
    if model_kwargs.get(key) is not None and model_kwargs.get(needed) is None:
        reason = f": {why}" if why else ""
        raise ValueError(
            f"`{key}` was passed without `{needed}`{reason}. Pass both, as this model's processor returns them."
        )


def check_every_row_attends(attention_mask: torch.Tensor | None, needed_by: str) -> None:
    """Raise when a row of `attention_mask` is all zeros, for code that needs one attended token per row.

    Args:
        attention_mask (`torch.Tensor`, *optional*): `(batch_size, seq_len)`; `None` passes.
        needed_by (`str`): what needs it, for the message (e.g. "this model's multimodal positions").
    """
    if attention_mask is None or attention_mask.ndim != 2:
        return
    empty = (~attention_mask.bool().any(dim=-1)).nonzero().flatten().tolist()
    if empty:
        raise ValueError(
            f"`attention_mask` row(s) {empty} are all zeros (no token to attend to), and {needed_by} need at least "
            "one attended token per row. Drop the empty rows from the batch, or give each row at least one real "
            "token (e.g. the BOS token) with mask 1."
        )


def cached_key_shape(text_config: PreTrainedConfig) -> tuple[int, int]:
    """`(heads, head_dim)` of the keys a decoder layer of this config writes to its cache.

    Args:
        text_config (`PreTrainedConfig`): the decoder's config, or one layer's (`per_layer_config[i]`).

    Returns:
        `tuple[int, int]`
    """
    if getattr(text_config, "kv_lora_rank", None):
        # Latent attention (DeepSeek-V3 and its kin) caches the compressed KV as one head of `kv_lora_rank` keys
        return 1, text_config.kv_lora_rank
    num_kv_heads = getattr(text_config, "num_key_value_heads", None) or text_config.num_attention_heads
    head_dim = getattr(text_config, "head_dim", None) or text_config.hidden_size // text_config.num_attention_heads
    return num_kv_heads, head_dim


def _num_cache_layers(text_config: PreTrainedConfig) -> int:
    # A decoder that loops layers keeps one cache layer per pass (Inkling2-Loop's `total_num_hidden_layers`)
    return getattr(text_config, "total_num_hidden_layers", None) or text_config.num_hidden_layers


def cached_key_shapes(text_config: PreTrainedConfig) -> list[tuple[int, int]]:
    """`(heads, head_dim)` of the keys each cache layer of this decoder holds, one entry per cache layer.

    A heterogeneous config (transformers' `per_layer_config`: Gemma 4's full-attention layers have their own head
    dimension, and key-value heads where `attention_k_eq_v`) refuses to answer per-layer attributes globally, so each
    layer's shape comes from its own layer config.

    Args:
        text_config (`PreTrainedConfig`): the decoder's config.

    Returns:
        `list[tuple[int, int]]`
    """
    num_cache_layers = _num_cache_layers(text_config)
    if not getattr(text_config, "per_layer_attributes", None):
        return [cached_key_shape(text_config)] * num_cache_layers
    layer_configs = text_config.per_layer_config
    # One pass over the layers per loop: a cache layer of a later pass has the shape of its layer in the first pass
    return [cached_key_shape(layer_configs[index % len(layer_configs)]) for index in range(num_cache_layers)]


def check_cache_matches_model(
    cache, config: PreTrainedConfig, batch_size: int, key_shape: tuple[int, int] | None = None
) -> None:
    """Raise when a KV cache cannot belong to this model or this batch.

    Args:
        cache (`Cache`): the caller's cache.
        config (`PreTrainedConfig`): the model's config.
        batch_size (`int`): rows of `input_ids`.
        key_shape (`tuple[int, int]`, *optional*):
            `(heads, last dimension)` of the keys the model caches in every layer (`FamilyHooks.cached_key_shape`);
            by default each layer's key-value heads and head dimension (`cached_key_shapes`).
    """
    text_config = config.get_text_config(decoder=True)
    layers = getattr(cache, "layers", None)
    if not layers or cache.get_seq_length() == 0:
        return
    expected_layers = _num_cache_layers(text_config)
    expected_shapes = cached_key_shapes(text_config) if key_shape is None else [key_shape] * expected_layers
    if len(layers) != expected_layers:
        raise ValueError(
            f"The cache has {len(layers)} layers but this model's decoder has {expected_layers}: it was made by "
            "another model. Pass a cache filled by this model, or none."
        )
    for index, layer in enumerate(layers):
        # Layers that hold no keys (KV-shared layers reading another layer's, recurrent layers) have nothing to check
        keys = getattr(layer, "keys", None)
        if not isinstance(keys, torch.Tensor) or keys.ndim != 4 or keys.numel() == 0:
            continue
        num_kv_heads, head_dim = expected_shapes[index]
        if keys.shape[1] != num_kv_heads or keys.shape[-1] != head_dim:
            raise ValueError(
                f"Cache layer {index} holds keys of shape {tuple(keys.shape)} (heads={keys.shape[1]}, "
                f"head_dim={keys.shape[-1]}) but this model expects heads={num_kv_heads}, head_dim={head_dim} in "
                "that layer: it was made by another model. Pass a cache filled by this model, or none."
            )
        if keys.shape[0] != batch_size:
            raise ValueError(
                f"The cache holds {keys.shape[0]} rows but `input_ids` has {batch_size}. Pass the cache of this "
                "very batch (or a cache per request)."
            )


def check_pixel_shapes(pixel_values: torch.Tensor, vision_config: PreTrainedConfig | None) -> None:
    """Raise when fixed-resolution pixel inputs do not have the vision tower's channels and size.

    Args:
        pixel_values (`torch.Tensor`): `(num_images, channels, height, width)`.
        vision_config (`PreTrainedConfig`, *optional*): the vision tower's config.
    """
    if vision_config is None:
        return
    channels = getattr(vision_config, "num_channels", 3)
    size = getattr(vision_config, "image_size", None)
    if isinstance(size, int):
        size = (size, size)
    expected = (channels, *size) if size is not None else None
    if pixel_values.ndim != 4 or (expected is not None and tuple(pixel_values.shape[1:]) != expected):
        want = f"(num_images, {', '.join(map(str, expected))})" if expected else "(num_images, channels, h, w)"
        raise ValueError(
            f"`pixel_values` has shape {tuple(pixel_values.shape)} but this model's vision tower takes {want}. "
            "Preprocess the images with this model's image processor (it resizes and normalizes them)."
        )


def check_pixel_dims(
    pixel_values: torch.Tensor,
    vision_config: PreTrainedConfig | None,
    leading: Sequence[str] = ("num_images",),
    name: str = "pixel_values",
    up_to_size: bool = False,
) -> None:
    """Raise when pixel inputs ending in `(channels, height, width)` do not fit the vision tower.

    Args:
        pixel_values (`torch.Tensor`): `(*leading, channels, height, width)`.
        vision_config (`PreTrainedConfig`, *optional*): the vision tower's config.
        leading (`Sequence[str]`, *optional*, defaults to `("num_images",)`):
            names of the dimensions before `(channels, height, width)`, e.g. `("num_images", "crops")`.
        name (`str`, *optional*, defaults to `"pixel_values"`): the input's name, for the message.
        up_to_size (`bool`, *optional*, defaults to `False`):
            whether any height and width up to `image_size` that are multiples of `patch_size` are taken (Pixtral),
            rather than exactly `image_size`.
    """
    if vision_config is None:
        return
    channels = getattr(vision_config, "num_channels", 3)
    size = getattr(vision_config, "image_size", None)
    size = (size, size) if isinstance(size, int) else size
    patch = getattr(vision_config, "patch_size", 1)
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch
    fits = pixel_values.ndim == len(leading) + 3 and pixel_values.shape[-3] == channels
    if fits and size is not None:
        height, width = pixel_values.shape[-2:]
        if up_to_size:
            fits = height <= size[0] and width <= size[1] and height % patch == 0 and width % patch == 0
        else:
            fits = (height, width) == tuple(size)
    if not fits:
        if size is None:
            hw = "h, w"
        elif up_to_size:
            hw = f"h <= {size[0]}, w <= {size[1]}; multiples of {patch}"
        else:
            hw = f"{size[0]}, {size[1]}"
        raise ValueError(
            f"`{name}` has shape {tuple(pixel_values.shape)} but this model's vision tower takes "
            f"({', '.join(leading)}, {channels}, {hw}). Preprocess the images with this model's image processor "
            "(it resizes and normalizes them)."
        )


def check_patch_rows(pixel_values: torch.Tensor, vision_config: PreTrainedConfig | None) -> None:
    """Raise when NaFlex pixel inputs are not rows of flattened patches the tower's patch embedding takes.

    Args:
        pixel_values (`torch.Tensor`): `(num_tiles, max_patches, channels * patch_size**2)`.
        vision_config (`PreTrainedConfig`, *optional*): the vision tower's config.
    """
    if vision_config is None:
        return
    patch_dim = vision_config.num_channels * vision_config.patch_size**2
    if pixel_values.ndim != 3 or pixel_values.shape[-1] != patch_dim:
        raise ValueError(
            f"`pixel_values` has shape {tuple(pixel_values.shape)} but this model's vision tower takes "
            f"(num_tiles, max_patches, {patch_dim}): flattened patches of {vision_config.num_channels} x "
            f"{vision_config.patch_size} x {vision_config.patch_size}. Preprocess the images with this model's "
            "image processor."
        )


def check_no_block_after_cache_in_static_cache(
    cache, chunks: Sequence[tuple[int, int]], intervals: Sequence[tuple[int, int]]
):
    """Raise when a forward after cached tokens, into a static (compileable) cache, holds a bidirectional block.

    With a compileable cache, transformers builds the attention mask of a forward before it runs, from the token
    types of that forward's tokens alone; a bidirectional block written after cached tokens then gets a mask that is
    off, and the logits are silently wrong (transformers' own chunked prefill is wrong there too). The dynamic cache
    builds its mask in the forward and is exact.

    Args:
        cache (`Cache`, *optional*): the cache prefill writes into.
        chunks (`Sequence[tuple[int, int]]`): the planned forwards, `(start, end)` positions.
        intervals (`Sequence[tuple[int, int]]`): the merged bidirectional blocks.
    """
    if cache is None or not getattr(cache, "is_compileable", False):
        return
    for chunk_start, chunk_end in chunks:
        if chunk_start == 0:
            continue
        for block_start, block_end in intervals:
            if block_start < chunk_end and block_end > chunk_start:
                raise ValueError(
                    f"A bidirectional block (positions {block_start}..{block_end - 1}) would be prefilled after "
                    f"{chunk_start} cached tokens into a static cache ({type(cache).__name__}), whose attention "
                    "mask transformers builds from the new tokens alone: the logits would be wrong. Use the default "
                    "dynamic cache (no `cache_implementation`), or prefill the prompt in one forward from an empty "
                    "cache (`prefill_chunk_size=None`, no cached prefix)."
                )


def check_prefill_chunk_size(chunk_size, cache) -> int | None:
    """Raise when `prefill_chunk_size` is not a positive int or `None`, or asks for chunks without a cache.

    Args:
        chunk_size: the call's `generation_config.prefill_chunk_size`.
        cache (`Cache`, *optional*): the cache prefill writes into.

    Returns:
        `int | None`: `chunk_size`.
    """
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise TypeError(f"`prefill_chunk_size` must be a positive int or None, got {chunk_size!r}.")
    if chunk_size is not None and cache is None:
        raise ValueError("Chunked prefill needs a cache: pass `use_cache=True` or `prefill_chunk_size=None`.")
    return chunk_size


def check_token_types_place_items(
    facts, config: PreTrainedConfig, input_ids: torch.Tensor, token_types: torch.Tensor, offset: int, given: int
) -> None:
    """Raise when a caller's token types, shorter than the sequence, may leave an item out of its bidirectional block.

    Types padded over the cached tokens (as text) or over tokens appended to `input_ids` (as generated text) are
    right only when no item token falls there: a cached image padded as text would silently fall out of the block
    the new tokens' images belong to (Molmo2), or keep KV computed without the rest of its run (Gemma3); types of the
    new tokens only, put at the start of the whole `input_ids`, mark its images wrong (PaliGemma: as suffix).

    Args:
        facts (`VisionFacts`): the family's facts (`bidirectional` set).
        config (`PreTrainedConfig`): the model config (for the image placeholder id).
        input_ids (`torch.Tensor` of shape `(batch_size, prompt_length)`): the prompt.
        token_types (`torch.Tensor`): the types, already padded after the given ones to `prompt_length`.
        offset (`int`): cached tokens before `input_ids` (only the new tokens were passed), else 0.
        given (`int`): the length of the types the caller passed.
    """
    key, prompt_length = facts.token_type_key, input_ids.shape[-1]
    fix = (
        f"Pass the whole sequence's `{key}` (the cached tokens' and the new ones', as the processor returns them "
        "for the whole conversation) together with the cache."
    )
    if facts.bidirectional == "prefix":
        in_block = token_types == 0  # PaliGemma: images belong to the prefix
    else:
        in_block = torch.isin(token_types, torch.tensor(facts.block_token_types, device=token_types.device))
    if offset and given == prompt_length and facts.bidirectional != "prefix":
        # (A prefix padded over the cache reaches into it: the resume point check refuses that when it matters.)
        # Each image run is its own block (Gemma3): only one starting right at the cache may have begun inside it
        reaches_cache = in_block[:, 0].any() if facts.bidirectional == "image" else in_block.any()
        if reaches_cache:
            raise ValueError(
                f"`{key}` covers only the {prompt_length} tokens after the {offset} cached ones, and their image "
                "tokens form a bidirectional block that may hold image tokens of the cached part, which the cache "
                f"cannot tell. {fix}"
            )
    if given < prompt_length:
        misplaced = (input_ids == facts.placeholder_id(config)) & ~in_block
        if misplaced.any():
            row, position = (int(index) for index in misplaced.nonzero()[0])
            raise ValueError(
                f"`{key}` has {given} tokens but `input_ids` has {prompt_length}, and the types do not mark the image "
                f"placeholder at row {row}, position {position}: they are not the types of the start of "
                f"`input_ids` (types of the tokens after a cache only?). {fix}"
            )
