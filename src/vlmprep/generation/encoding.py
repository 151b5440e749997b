"""`ItemEncoder`: the features of one call's items (images, videos), encoder-cache lookups first, then one batched
encoder call per modality."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

from ..cache.hash_hints import hinted_hash
from ..cache.hashing import hash_item_inputs
from ..cache.identity import any_module_training
from .batch_statistics import check_no_batch_statistics
from .prepared import PlannedEncoderOutputs, split_per_item
from .spans import ItemSpan

# Per-item features handed in by the caller, and their per-layer deepstack features, by item index.
SuppliedFeatures = tuple[dict[int, torch.Tensor], dict[int, tuple[torch.Tensor, ...]]]


def encoding_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose encoders (`encoder_name`) encode a model's items: its inner `model`, or the model itself where
    the towers sit on the top-level class (BLIP-2, InstructBLIP, Nemotron-H Omni) or the inner model has no
    `get_<modality>_features` (T5Gemma 2, whose tower is its encoder's; Llama 3.2 Vision, whose forward runs tower and
    projector, and whose drop-in has its own `encode_image_items`), as `vlmprep.testing.VisionRunCounter` finds them."""
    inner = getattr(model, "model", None)
    if inner is None or not any(hasattr(inner, f"get_{name}_features") for name in ("image", "video", "audio")):
        return model
    return inner


# Where transformers' class has no `get_<modality>_features` (its forward runs the tower itself), the drop-in defines
# its encoder under this name instead: upstream's name would change what callers see of the class (transformers' own
# tests call `get_image_features` where `hasattr` finds it, with upstream's inputs and expecting upstream's outputs).
OWN_ENCODER_NAME = "encode_{modality}_items"


def encoder_name(owner: torch.nn.Module | type, modality: str) -> str:
    """The name of the method of `owner` (`encoding_module(model)`) that encodes a modality's items: the drop-in's
    own `encode_<modality>_items` where it has one, else transformers' `get_<modality>_features`.

    Args:
        owner (`torch.nn.Module` or `type`): the module (or its class) holding the encoder.
        modality (`str`): `"image"`, `"video"`, ...

    Returns:
        `str`
    """
    own = OWN_ENCODER_NAME.format(modality=modality)
    return own if hasattr(owner, own) else f"get_{modality}_features"


@functools.lru_cache(maxsize=256)
def _encoder_argument_names(encoder_class: type, modality: str, skip: frozenset[str]) -> tuple[str, ...]:
    # The encoder's arguments besides the per-item inputs (e.g. `vision_feature_layer`): read once per class, they
    # change an item's features and are hashed with it.
    parameters = inspect.signature(getattr(encoder_class, encoder_name(encoder_class, modality))).parameters
    return tuple(name for name in parameters if name not in skip and name != "self")


class ItemEncoder:
    """Content hashes and features of the items of one `generate` call.

    Args:
        model: the drop-in model (its `vision_facts`, family hooks, `encoder_cache` and `model.get_<modality>_features`).
        model_kwargs (`dict[str, Any]`): the call's inputs, pixel inputs included.
        spans (`list[ItemSpan]`): every span of the prompt.
        salt (`str`, *optional*): the call's cache salt, hashed into every content hash.
        hints (`dict[tuple[str, int], object]`, *optional*): a caller's names for items' inputs, by (modality, input
            index): a hash made before under the same hint is taken (`vlmprep.cache.hash_hints`).
    """

    def __init__(
        self,
        model,
        model_kwargs: dict[str, Any],
        spans: list[ItemSpan],
        salt: str | None = None,
        hints: dict[tuple[str, int], object] | None = None,
    ):
        self.model = model
        self.model_kwargs = model_kwargs
        self.salt = salt
        self.hints = hints or {}
        self.span_of = {span.item_index: span for span in spans}
        self.lengths = _item_lengths(spans)  # placeholder tokens of each item, over all of its pieces

    def encoder_argument_names(self, modality: str) -> tuple[str, ...]:
        """Arguments of `get_<modality>_features` that are not per-item inputs (read from the call's inputs)."""
        facts = self.model.vision_facts.modality(modality)
        skip = frozenset({"kwargs", *facts.item_keys})
        return _encoder_argument_names(type(encoding_module(self.model)), modality, skip)

    def _shared_arguments(self, modality: str) -> dict[str, Any]:
        names = self.encoder_argument_names(modality)
        return {name: self.model_kwargs[name] for name in names if self.model_kwargs.get(name) is not None}

    def _item_inputs(self, modality: str, indices: list[int]) -> dict[str, Any]:
        # Pixel inputs of the items at `indices` (indices among the items of `modality`).
        return self.model.select_item_inputs(self.model_kwargs, indices, modality=modality)

    def hashes(self, indices: list[int]) -> dict[int, str]:
        """The content hash of each item: its pixel inputs and per-item extras, plus every encoder argument.

        Args:
            indices (`list[int]`): item indices (numbered over every modality, as `ItemSpan.item_index`).

        Returns:
            `dict[int, str]`
        """
        hashes = {}
        for index in indices:
            span = self.span_of[index]
            inputs = {**self._item_inputs(span.modality, [span.input_index]), **self._shared_arguments(span.modality)}
            hint = self.hints.get((span.modality, span.input_index))
            # With a caller's hint for these very inputs (a server's media cache), a hash made before is taken
            hashes[index] = hinted_hash(
                hint, inputs, self.salt, lambda inputs=inputs: hash_item_inputs(inputs, salt=self.salt)
            )
        return hashes

    def supplied_features(self, supplied: dict | None) -> SuppliedFeatures:
        """Per-item features the caller passed as `mm_encoder_outputs` instead of pixels (transformers accepts them).

        Two forms: a main model's `PlannedEncoderOutputs` (an assistant model that is a drop-in gets the main
        model's kwargs), whose per-item features are read as they are; or upstream's raw encoder outputs per modality
        (`get_<modality>_features(..., return_dict=True)` of every item of the prompt), split per item here.

        Args:
            supplied (`dict`, *optional*): the `mm_encoder_outputs` the call was given.

        Returns:
            `tuple[dict, dict]`: features and deepstack features by item index.
        """
        if not supplied:
            return {}, {}
        if isinstance(supplied, PlannedEncoderOutputs):
            return dict(supplied.prepared.features), dict(supplied.prepared.deepstack)
        features: dict[int, torch.Tensor] = {}
        deepstack: dict[int, tuple[torch.Tensor, ...]] = {}
        features_key = self.model.vision_facts.features_key
        for modality in self.model.vision_facts.modalities:
            output = supplied.get(modality.name)
            items = sorted(index for index, span in self.span_of.items() if span.modality == modality.name)
            if output is None or not items:
                continue
            counts = [self.lengths[index] for index in items]
            layers = deepstack_layers(output)
            pooled = _split_checked(features_of(output, features_key, layers), counts, modality.name)
            per_layer = [_split_checked(layer, counts, modality.name) for layer in layers] if layers else None
            for position, index in enumerate(items):
                features[index] = pooled[position]
                if per_layer is not None:
                    deepstack[index] = tuple(layer[position] for layer in per_layer)
        return features, deepstack

    def _check_pixels_present(self, indices: list[int]) -> None:
        # Items prefill must encode need their pixels; other per-item inputs (grids) alone only serve cached items.
        for index in indices:
            span = self.span_of[index]
            pixel_keys = self.model.vision_facts.modality(span.modality).pixel_keys
            if all(self.model_kwargs.get(key) is None for key in pixel_keys):
                raise ValueError(
                    f"{span.modality.capitalize()} {span.input_index} (placeholders at row {span.row}, position "
                    f"{span.start}) is not in the cache, but no `{pixel_keys[0]}` was passed. Pass the pixel inputs "
                    f"of every {span.modality} of the prompt (with their grids)."
                )

    def features(
        self,
        needed: list[int],
        known_hashes: dict[int, str] | None = None,
        supplied: SuppliedFeatures | None = None,
    ) -> SuppliedFeatures:
        """Features (and per-layer deepstack features, when the encoder returns them) of every needed item.

        Supplied features are used as they are; the rest come from the encoder cache, then from one encoder call per
        modality for the misses, which are stored. An item the call holds twice (the same key: identity and content
        hash) is looked up and encoded once, its rows serving every occurrence.

        Args:
            needed (`list[int]`): item indices prefill needs.
            known_hashes (`dict[int, str]`, *optional*): content hashes already computed (by the prefix lookup).
            supplied (`SuppliedFeatures`, *optional*): features the caller passed.

        Returns:
            `tuple[dict, dict]`: features `(tokens, dim)` and deepstack features by item index.
        """
        model = self.model
        cache = model.encoder_cache
        # An item's features are a function of its key only with no graph to keep and no module drawing dropout or
        # updating batch statistics: then, and only then, are they served from the cache or shared by repeats (keys
        # exist with the cache on, or from a prefix lookup's hashes; without either the module walk is skipped).
        keyed = cache is not None or bool(known_hashes)
        reusable = keyed and not torch.is_grad_enabled() and not any_module_training(model)
        use_cache = cache is not None and reusable
        given_features, given_deepstack = supplied or ({}, {})
        features = {index: given_features[index] for index in needed if index in given_features}
        deepstack = {index: given_deepstack[index] for index in features if index in given_deepstack}
        pending = [index for index in needed if index not in features]
        self._check_pixels_present(pending)
        keys = self._keys(pending, known_hashes or {}, use_cache) if reusable else {}
        # The first occurrence of each key stands for the item; later ones take its rows (no lookup, no encoding).
        first_of: dict[tuple, int] = {}
        representative = {
            index: first_of.setdefault((self.span_of[index].modality, keys[index]), index) if index in keys else index
            for index in pending
        }
        distinct = [index for index in pending if representative[index] == index]
        if use_cache:
            for index in distinct:
                hit = cache.get(keys[index])
                if isinstance(hit, dict):  # stored with its deepstack features
                    features[index], deepstack[index] = hit["features"], hit["deepstack"]
                elif hit is not None:
                    features[index] = hit
        misses = [index for index in distinct if index not in features]
        if misses:
            check_no_batch_statistics(encoding_module(model))
        for modality in model.vision_facts.modalities:
            group = [index for index in misses if self.span_of[index].modality == modality.name]
            if not group:
                continue
            inputs = self._item_inputs(modality.name, [self.span_of[index].input_index for index in group])
            check_finite_pixels(inputs, modality.pixel_keys)
            kept_rows = inputs.pop(modality.kept_rows_key, None) if modality.kept_rows_key else None
            owner = encoding_module(model)
            encode = getattr(owner, encoder_name(owner, modality.name))
            outputs = encode(**inputs, **self._shared_arguments(modality.name), return_dict=True)
            counts = [self.lengths[index] for index in group]
            layers = deepstack_layers(outputs)
            rows = _without_padding_rows(outputs, model.vision_facts.features_key, modality.output_mask_attr, layers)
            pooled = split_per_item(rows if kept_rows is None else _kept(rows, kept_rows), counts)
            per_layer = [split_per_item(layer, counts) for layer in layers] if layers is not None else None
            for position, index in enumerate(group):
                features[index] = entry = pooled[position]
                if per_layer is not None:
                    deepstack[index] = tuple(layer[position] for layer in per_layer)
                    entry = {"features": features[index], "deepstack": deepstack[index]}
                if use_cache:
                    cache.put(keys[index], entry)
        for index in pending:
            first = representative[index]
            if first != index:  # the same tensors as the first occurrence's: read only, as cached features are
                features[index] = features[first]
                if first in deepstack:
                    deepstack[index] = deepstack[first]
        if model.vision_facts.cross_attention is None:  # cross-attention states fill no placeholders
            self._check_feature_rows(needed, features)
        return features, deepstack

    def _keys(self, pending: list[int], known: dict[int, str], use_cache: bool) -> dict[int, tuple]:
        # The encoder-cache key of each pending item: (*identity, content hash). With the cache off only the hashes
        # the call already holds (the prefix lookup's) key items, the identity left out as one call has one: hashing
        # only to find repeats is a sha256 pass over every item's pixels (~15 ms for a 896 px image on a CPU core,
        # more with the copy off a GPU, about what encoding it costs there), which turning the cache off opts out of.
        if not use_cache:
            return {index: (known[index],) for index in pending if index in known}
        if not pending:
            # The identity walks every weight of the vision part: only worth it when an item is looked up (a text
            # prompt, or one whose items all lie in the KV cache, looks up nothing).
            return {}
        identity = self.model._encoder_cache_identity()
        hashes = {**known, **self.hashes([index for index in pending if index not in known])}
        return {index: (*identity, hashes[index]) for index in pending}

    def _check_feature_rows(self, needed: list[int], features: dict[int, torch.Tensor]) -> None:
        for index in needed:
            span = self.span_of[index]
            if features[index].shape[0] != self.lengths[index]:
                raise ValueError(
                    f"{span.modality.capitalize()} {span.input_index} has {self.lengths[index]} placeholder tokens "
                    f"but its vision features have {features[index].shape[0]} rows. The prompt was built for another "
                    f"{span.modality} size or model config; build it with this model's processor."
                )


def check_finite_pixels(inputs: dict[str, Any], pixel_keys: tuple[str, ...]) -> None:
    """Raise when pixel inputs hold NaN or infinity: the vision tower would turn them into NaN logits, silently."""
    for key in pixel_keys:
        values = inputs.get(key)
        pieces = values if isinstance(values, (list, tuple)) else [values]
        for piece in pieces:
            if isinstance(piece, torch.Tensor) and piece.is_floating_point() and not bool(torch.isfinite(piece).all()):
                raise ValueError(
                    f"`{key}` holds NaN or infinite values, which would give NaN logits. Check the image loading and "
                    "preprocessing (e.g. a division by a zero standard deviation)."
                )


def _without_padding_rows(outputs, features_key: str | None, output_mask_attr: str | None, layers: list | None):
    # An encoder that pads a batch of items to the longest (audio clips) marks its real rows; the model fills the
    # placeholders with those only, so each item's features are its real rows.
    features = features_of(outputs, features_key, layers)
    if output_mask_attr is None:
        return features
    real_rows = getattr(outputs, output_mask_attr)  # (num_items, rows), True where a row is real
    return [rows[keep.to(rows.device).bool()] for rows, keep in zip(features, real_rows, strict=True)]


def _kept(rows, kept_rows: torch.Tensor) -> list[torch.Tensor]:
    # The encoder's rows of each item (a list, one entry per item), less those the model's row mask drops: the mask
    # covers the items' rows in order, so each item takes its own stretch of it.
    pieces = [piece.reshape(-1, piece.shape[-1]) for piece in rows]
    masks = torch.split(kept_rows.to(pieces[0].device).bool(), [piece.shape[0] for piece in pieces])
    return [piece[mask] for piece, mask in zip(pieces, masks, strict=True)]


def _item_lengths(spans: list[ItemSpan]) -> dict[int, int]:
    lengths: dict[int, int] = {}
    for span in spans:
        lengths[span.item_index] = lengths.get(span.item_index, 0) + span.length
    return lengths


def _split_checked(output, counts: list[int], modality: str) -> list[torch.Tensor]:
    pieces = output if isinstance(output, (list, tuple)) else [output]
    rows = sum(piece.numel() // piece.shape[-1] for piece in pieces)  # feature rows, whatever the nesting
    total = sum(counts)
    if rows != total:
        raise ValueError(
            f"`mm_encoder_outputs['{modality}']` has {rows} feature rows but the prompt has {total} {modality} "
            f"placeholder tokens. Pass the encoder outputs of every {modality} of the prompt, in prompt order, or "
            "pass the pixel inputs instead."
        )
    return split_per_item(output, counts)


def deepstack_layers(outputs) -> list | None:
    """The per-layer extra features of a vision encoder output (deepstack), or `None` when it has none.

    Two containers are read: one entry per layer in layer order (Qwen3-VL), or `(decoder layer, features)` pairs
    (Granite 4 Vision), whose layers are a fact of the family (`VisionFacts.deepstack_targets`); either way each
    entry's features are a tensor or per-item tensors, returned here in entry order.
    """
    layers = getattr(outputs, "deepstack_features", None)
    if layers is None:
        return None
    layers = [layer[1] if _is_layer_pair(layer) else layer for layer in layers]
    if not all(isinstance(layer, torch.Tensor) or _all_tensors(layer) for layer in layers):
        return None
    return layers


def features_of(outputs, features_key: str | None, layers: list | None):
    """The features an encoder output places at the placeholders: its `features_key` field, or, for an output with
    only deepstack features (`features_key=None`), the first entry's, which the model counts placeholders against."""
    if features_key is not None:
        return getattr(outputs, features_key)
    if not layers:
        raise ValueError(
            "The vision encoder output has neither features nor deepstack features: pass the pixel inputs, or the "
            "output of the model's own `get_image_features(..., return_dict=True)`."
        )
    return layers[0]


def _is_layer_pair(entry) -> bool:
    # `(decoder layer, features)`: Granite 4 Vision's deepstack entry
    return isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], int)


def _all_tensors(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(item, torch.Tensor) for item in value)
