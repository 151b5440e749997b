"""Vision encoding for the mixin: encoder-cache lookups first, then one batched encoder call per modality."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ..cache.hashing import hash_image_inputs
from .facts import ModalityFacts
from .prepared import PlannedEncoderOutputs, split_per_image
from .spans import ImageSpan

# Per-item features handed in by the caller, and their per-layer deepstack features, by item index.
SuppliedFeatures = tuple[dict[int, torch.Tensor], dict[int, tuple[torch.Tensor, ...]]]


class ImageEncodingMixin:
    """The encoding half of `VisionPrepGenerationMixin`: content hashes, encoder-cache lookups, batched encoder calls.

    Expects the host to provide `vision_facts`, `encoder_cache`, `_encoder_cache_identity` and the family hooks
    (`select_image_inputs`, ...), as `VisionPrepGenerationMixin` does.
    """

    def _modality_facts(self, name: str) -> ModalityFacts:
        return next(modality for modality in self.vision_facts.modalities if modality.name == name)

    @staticmethod
    def _modality_hook(hook, name: str, *args):
        # Single-modality families override the hooks without `modality`: images are asked as they always were.
        return hook(*args) if name == "image" else hook(*args, modality=name)

    def _encoder_kwarg_names(self, modality: str = "image") -> list[str]:
        parameters = inspect.signature(getattr(self.model, f"get_{modality}_features")).parameters
        facts = self._modality_facts(modality)
        skip = {"kwargs", *facts.pixel_keys, *facts.per_item_keys}
        return [name for name in parameters if name not in skip]

    def _shared_encoder_kwargs(self, modality: str, model_kwargs: dict[str, Any]) -> dict[str, Any]:
        names = self._encoder_kwarg_names(modality)
        return {name: model_kwargs[name] for name in names if model_kwargs.get(name) is not None}

    def _item_inputs(self, span: ImageSpan, indices: list[int], model_kwargs: dict[str, Any]) -> dict[str, Any]:
        # Pixel inputs of the items at `indices` (indices among the items of `span.modality`).
        return self._modality_hook(self.select_image_inputs, span.modality, model_kwargs, indices)

    def _image_hashes(
        self, indices: list[int], spans: list[ImageSpan], model_kwargs: dict[str, Any], salt: str | None
    ) -> dict[int, str]:
        # The content hash of each item: its pixel inputs and per-item extras, plus every encoder argument.
        span_of = {span.image_index: span for span in spans}
        hashes = {}
        for index in indices:
            span = span_of[index]
            inputs = self._item_inputs(span, [span.input_index], model_kwargs)
            shared = self._shared_encoder_kwargs(span.modality, model_kwargs)
            hashes[index] = hash_image_inputs({**inputs, **shared}, salt=salt)
        return hashes

    def _supplied_features(self, supplied: dict | None, spans: list[ImageSpan]) -> SuppliedFeatures:
        """Per-item features the caller passed as `mm_encoder_outputs` instead of pixels (transformers accepts them).

        Two forms: a main model's `PlannedEncoderOutputs` (an assistant model that is a drop-in gets the main
        model's kwargs), whose per-item features are read as they are; or upstream's raw encoder outputs per modality
        (`get_<modality>_features(..., return_dict=True)` of every item of the prompt), split per item here.
        """
        if not supplied:
            return {}, {}
        if isinstance(supplied, PlannedEncoderOutputs):
            return dict(supplied.prepared.features), dict(supplied.prepared.deepstack)
        lengths = _item_lengths(spans)
        features: dict[int, torch.Tensor] = {}
        deepstack: dict[int, tuple[torch.Tensor, ...]] = {}
        for modality in self.vision_facts.modalities:
            output = supplied.get(modality.name)
            items = sorted({span.image_index for span in spans if span.modality == modality.name})
            if output is None or not items:
                continue
            counts = [lengths[index] for index in items]
            pooled = _split_checked(output.pooler_output, counts, modality.name)
            layers = deepstack_layers(output)
            per_layer = [_split_checked(layer, counts, modality.name) for layer in layers] if layers else None
            for position, index in enumerate(items):
                features[index] = pooled[position]
                if per_layer is not None:
                    deepstack[index] = tuple(layer[position] for layer in per_layer)
        return features, deepstack

    def _check_pixels_present(self, indices: list[int], span_of: dict, model_kwargs: dict[str, Any]) -> None:
        # Items prefill must encode need their pixels; other per-item inputs (grids) alone only serve cached items.
        for index in indices:
            span = span_of[index]
            pixel_keys = self._modality_facts(span.modality).pixel_keys
            if all(model_kwargs.get(key) is None for key in pixel_keys):
                raise ValueError(
                    f"{span.modality.capitalize()} {span.input_index} (placeholders at row {span.row}, position "
                    f"{span.start}) is not in the cache, but no `{pixel_keys[0]}` was passed. Pass the pixel inputs "
                    f"of every {span.modality} of the prompt (with their grids)."
                )

    def _image_features(
        self,
        needed: list[int],
        spans: list[ImageSpan],
        model_kwargs: dict[str, Any],
        salt: str | None,
        image_hashes: dict[int, str] | None = None,
        supplied: SuppliedFeatures | None = None,
    ) -> tuple[dict[int, torch.Tensor], dict[int, tuple[torch.Tensor, ...]]]:
        # Features (and per-layer deepstack features, when the encoder returns them) of every needed item.
        span_of = {span.image_index: span for span in spans}
        lengths = _item_lengths(spans)  # placeholder tokens of each item, over all of its pieces

        cache = self.encoder_cache
        use_cache = cache is not None and not self.training and not torch.is_grad_enabled()
        given_features, given_deepstack = supplied or ({}, {})
        features = {index: given_features[index] for index in needed if index in given_features}
        deepstack = {index: given_deepstack[index] for index in features if index in given_deepstack}
        self._check_pixels_present([index for index in needed if index not in features], span_of, model_kwargs)
        keys: dict[int, tuple] = {}
        if use_cache:
            identity = self._encoder_cache_identity()
            known = image_hashes or {}
            missing_hashes = [index for index in needed if index not in known and index not in features]
            hashes = {**known, **self._image_hashes(missing_hashes, spans, model_kwargs, salt)}
            for index in needed:
                if index in features:
                    continue
                keys[index] = (*identity, hashes[index])
                hit = cache.get(keys[index])
                if isinstance(hit, dict):  # stored with its deepstack features
                    features[index], deepstack[index] = hit["features"], hit["deepstack"]
                elif hit is not None:
                    features[index] = hit
        misses = [index for index in needed if index not in features]
        for modality in self.vision_facts.modalities:
            group = [index for index in misses if span_of[index].modality == modality.name]
            if not group:
                continue
            inputs = self._item_inputs(span_of[group[0]], [span_of[i].input_index for i in group], model_kwargs)
            check_finite_pixels(inputs, modality.pixel_keys)
            shared = self._shared_encoder_kwargs(modality.name, model_kwargs)
            outputs = getattr(self.model, f"get_{modality.name}_features")(**inputs, **shared, return_dict=True)
            counts = [lengths[index] for index in group]
            pooled = split_per_image(outputs.pooler_output, counts)
            layers = deepstack_layers(outputs)
            per_layer = [split_per_image(layer, counts) for layer in layers] if layers is not None else None
            for position, index in enumerate(group):
                features[index] = pooled[position]
                entry = features[index]
                if per_layer is not None:
                    deepstack[index] = tuple(layer[position] for layer in per_layer)
                    entry = {"features": features[index], "deepstack": deepstack[index]}
                if use_cache:
                    cache.put(keys[index], entry)
        for index in needed:
            if features[index].shape[0] != lengths[index]:
                name = span_of[index].modality.capitalize()
                raise ValueError(
                    f"{name} {span_of[index].input_index} has {lengths[index]} placeholder tokens but its vision "
                    f"features have {features[index].shape[0]} rows. The prompt was built for another "
                    f"{span_of[index].modality} size or model config; build it with this model's processor."
                )
        return features, deepstack


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


def _item_lengths(spans: list[ImageSpan]) -> dict[int, int]:
    lengths: dict[int, int] = {}
    for span in spans:
        lengths[span.image_index] = lengths.get(span.image_index, 0) + span.length
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
    return split_per_image(output, counts)


def select_images(value: Any, indices: list[int]) -> Any:
    """The entries of a per-image input (tensor or list) for the given image indices, in that order."""
    if isinstance(value, torch.Tensor):
        return value[indices]
    return [value[index] for index in indices]


def deepstack_layers(outputs) -> list | None:
    """The per-layer extra features of a vision encoder output (Qwen3-VL's deepstack), or `None` when it has none.

    Only the layout upstream generation carries is read: one entry per layer, each a tensor or per-item tensors.
    """
    layers = getattr(outputs, "deepstack_features", None)
    if layers is None or not all(isinstance(layer, torch.Tensor) or _all_tensors(layer) for layer in layers):
        return None
    return list(layers)


def _all_tensors(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(item, torch.Tensor) for item in value)
