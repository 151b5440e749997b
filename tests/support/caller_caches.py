"""Caches a caller could hand to `generate`, filled by the plain transformers class: the references of the cached-prefix
scenarios (a cache of the first tokens, cut inside an item, cropped after a chunk)."""

from __future__ import annotations

import contextlib
import inspect

import torch
from transformers import DynamicCache

from support.references import Prompt
from vlmprep.cache.recording import holds_recurrent_state, record_past


def cache_of(model, inputs: dict) -> DynamicCache:
    """KV cache of one forward over `inputs` (the upstream way a caller fills a cache)."""
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        output = model(**inputs, cache=cache, use_cache=True)
    # The cache passed in is the one filled; BLIP-2's output holds it only in `language_model_outputs`.
    return cache if getattr(output, "cache", None) is None else output.cache


class _FirstChunkFilled(Exception):
    """Stops transformers' `generate` once its first prefill chunk is in the cache."""


def cropped_cache(upstream, inputs: dict, length: int) -> DynamicCache:
    """Upstream's cache of the first `length` tokens of `inputs`, as transformers' own prefill fills it.

    The cache of the whole prompt (filled by `generate`, so left-padded rows get the positions `generate` gives
    them), cropped to `length`, where every layer can be cropped. A layer with a recurrent state (linear attention,
    Gated DeltaNet) cannot be put back by `crop` (its state only moves forward; transformers 5.25 keeps one past state
    per forward, not per token): there a one-row prompt's cache is upstream's forward over its first `length` tokens
    (`first_tokens_cache`), and a batch's is filled by transformers' own chunked prefill, the first `length` tokens
    as its first chunk, `generate` stopped there.
    """
    cache = DynamicCache(config=upstream.config)
    record_past(cache)  # lets the cache be cropped past a sliding window, and a convolution back
    with torch.no_grad():
        upstream.generate(**inputs, cache=cache, max_new_tokens=1, do_sample=False)
    if cache.is_croppable and not any(holds_recurrent_state(layer) for layer in cache.layers):
        cache.crop(length - cache.get_seq_length())
        return cache
    if inputs["input_ids"].shape[0] == 1:
        return first_tokens_cache(upstream, inputs, length)
    cache = DynamicCache(config=upstream.config)
    forwards = []

    def stop_after_first_chunk(module, args, kwargs):
        forwards.append(1)
        if len(forwards) > 1:
            raise _FirstChunkFilled

    handle = upstream.register_forward_pre_hook(stop_after_first_chunk, with_kwargs=True)
    try:
        with torch.no_grad(), contextlib.suppress(_FirstChunkFilled):
            upstream.generate(**inputs, cache=cache, max_new_tokens=1, do_sample=False, prefill_chunk_size=length)
    finally:
        handle.remove()
    assert cache.get_seq_length() == length, (cache.get_seq_length(), length)
    return cache


def _first_rows(container, rows: int):
    """The first `rows` feature rows of an encoder output field, in the same container (list, or batched tensor)."""
    if isinstance(container, (list, tuple)):
        flat = torch.cat([piece.reshape(-1, piece.shape[-1]) for piece in container])
        return [flat[:rows]]
    flat = container.reshape(-1, container.shape[-1])[:rows]
    return flat if container.ndim == 2 else flat.unsqueeze(0)


def _first_layer_rows(entry, rows: int):
    """`_first_rows` of one deepstack entry: a layer's rows (Qwen3-VL), or a `(decoder layer, rows)` pair (Granite 4
    Vision), kept a pair."""
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], int):
        return entry[0], _first_rows(entry[1], rows)
    return _first_rows(entry, rows)


def truncated_cache(upstream, prompt: Prompt, cut: int) -> DynamicCache:
    """The cache of upstream's forward over the prompt's first `cut` tokens, cut inside an image, as a caller who
    truncated the prompt mid-image would have it: the image's first rows of features, whole-prompt positions."""
    return first_tokens_cache(upstream, prompt.inputs(), cut)


def _runs_along_sequence(value, input_ids: torch.Tensor) -> bool:
    # A per-token input; per-image lists (as a processor returns Unlimited-OCR's counts) never are.
    return isinstance(value, torch.Tensor) and value.shape[-1] == input_ids.shape[-1]


def first_tokens_cache(upstream, inputs: dict, cut: int) -> DynamicCache:
    """The cache of upstream's forward over the first `cut` tokens of a one-row prompt (cut anywhere, also inside an
    image or a video).

    Everything comes from upstream: the features its own encoders give in an uncached forward of the whole prompt
    (recorded on `get_image_features` and `get_video_features`), their rows of the placeholders before `cut`, and the
    positions its language model received in that forward.
    """
    recorded = {}
    owner = getattr(upstream, "model", upstream)  # Nemotron-H Omni, BLIP-2 keep their encoders on the top-level class
    modalities = [name for name in ("image", "video") if hasattr(owner, f"get_{name}_features")]

    def recording(name, encode):
        def record(*args, **kwargs):
            recorded[name] = encode(*args, **kwargs)
            return recorded[name]

        return record

    def record_positions(module, args, kwargs):
        recorded["position_ids"] = kwargs.get("position_ids")

    for name in modalities:
        setattr(owner, f"get_{name}_features", recording(name, getattr(owner, f"get_{name}_features")))
    handle = upstream.get_decoder().register_forward_pre_hook(record_positions, with_kwargs=True)
    try:
        with torch.no_grad():
            upstream(**inputs, use_cache=False)
    finally:
        handle.remove()
        for name in modalities:
            delattr(owner, f"get_{name}_features")  # the instance attribute; the class method shows through again
    encoder_outputs = {}
    for name in (name for name in modalities if name in recorded):
        features = recorded[name]
        placeholders = int(_placeholders(upstream.config, inputs, name)[0, :cut].sum())
        fields = {}
        if features.pooler_output is not None:  # Granite 4 Vision has only deepstack features
            fields["pooler_output"] = _first_rows(features.pooler_output, placeholders)
        if getattr(features, "deepstack_features", None) is not None:  # Qwen3-VL: the same rows of every extra layer
            fields["deepstack_features"] = [
                _first_layer_rows(layer, placeholders) for layer in features.deepstack_features
            ]
        # Fields that depend on no item are read as they are (Ovis2's indicator embeddings)
        per_row = ("pooler_output", "deepstack_features", "last_hidden_state", "hidden_states", "attentions")
        fields.update({key: value for key, value in features.items() if key not in per_row})
        encoder_outputs[name] = type(features)(**fields)
    pixel_keys = {"pixel_values", "pixel_values_videos", "image_grid_thw", "video_grid_thw", "image_sizes"}
    first = {
        key: value[..., :cut] if key != "input_ids" and _runs_along_sequence(value, inputs["input_ids"]) else value
        for key, value in inputs.items()
        if key not in pixel_keys
    }
    first["input_ids"] = inputs["input_ids"][:, :cut]
    if recorded["position_ids"] is not None:
        first["position_ids"] = recorded["position_ids"][..., :cut]
    cache = DynamicCache(config=upstream.config)
    with torch.no_grad():
        upstream(
            **first, **_required_pixels(upstream), mm_encoder_outputs=encoder_outputs, cache=cache, use_cache=True
        )
    return cache


def _required_pixels(model) -> dict:
    """`pixel_values=None` for a forward that requires the argument even beside encoded features (BLIP-2's)."""
    pixels = inspect.signature(model.forward).parameters.get("pixel_values")
    return {"pixel_values": None} if pixels is not None and pixels.default is inspect.Parameter.empty else {}


def _placeholders(config, inputs: dict, modality: str) -> torch.Tensor:
    """Where a modality's placeholders are: by `mm_token_type_ids` (1 image, 2 video) where the processor gives
    them (GLM's frames reuse the image placeholder), else by the modality's placeholder id. Molmo2 types its image
    start, column and end tokens 1 too: only its `image_patch_id` tokens are placeholders."""
    token_types = inputs.get("mm_token_type_ids")
    if token_types is not None:
        typed = token_types == {"image": 1, "video": 2}[modality]
        patch_id = getattr(config, "image_patch_id", None)
        return typed & (inputs["input_ids"] == patch_id) if patch_id is not None else typed
    return inputs["input_ids"] == getattr(config, f"{modality}_token_id")
