"""Encoding at admission: the images of the requests admitted together, in one batched vision call.

Requests are encoded through the drop-in's own encoder path (`vlmprep.generation.encoding.ItemEncoder`): encoder-cache
hits first, then one vision call per modality for the misses, split per item and stored back. The requests admitted
together are encoded as one prompt of several rows; a request whose images fail (e.g. features that do not fit its
placeholders) fails alone, the others are encoded again without it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import torch

from ..generation.encoding import ItemEncoder
from ..generation.items import join_item_inputs
from .prompt import RequestItems


def encode_admitted(model, requests: list[RequestItems]) -> list[Exception | None]:
    """Compute the features of every request's items, batched across requests whose inputs can be concatenated.

    Args:
        model (`VisionPrepGenerationMixin`): the drop-in model the engine runs.
        requests (`list[RequestItems]`): the images of the requests admitted together; `features` is set on each.

    Returns:
        `list[Exception | None]`: per request, the error that makes it fail, or `None`.
    """
    errors: list[Exception | None] = [None] * len(requests)
    groups: dict[tuple, list[int]] = {}
    for position, request in enumerate(requests):
        key = (_concat_signature(request.item_inputs), model.encoding_group_key(request.item_inputs))
        groups.setdefault(key, []).append(position)
    for members in groups.values():
        try:
            _encode_together(model, [requests[position] for position in members])
        except Exception:  # noqa: BLE001 - one bad request must not fail the others: encode them one by one
            if len(members) == 1:
                errors[members[0]] = _error_of(model, requests[members[0]])
                continue
            for position in members:
                errors[position] = _error_of(model, requests[position])
    return errors


def _error_of(model, request: RequestItems) -> Exception | None:
    try:
        _encode_together(model, [request])
    except Exception as error:  # noqa: BLE001 - reported on the request
        return error
    return None


def _concat_signature(item_inputs: dict[str, Any]) -> tuple:
    # Requests concatenate into one encoder call when they hold the same inputs, tensors of the same trailing shape
    signature = []
    for key in sorted(item_inputs):
        value = item_inputs[key]
        if isinstance(value, torch.Tensor):
            signature.append((key, "tensor", tuple(value.shape[1:]), value.dtype))
        else:
            signature.append((key, type(value).__name__))
    return tuple(signature)


def _joined_item_inputs(model, parts: list[dict[str, Any]]) -> dict[str, Any]:
    # Each modality's inputs joined as its item schema says (flat inputs along their axis, clips padded); the rest
    # (position inputs) one entry per item
    joined, handled = {}, set()
    for modality in model.vision_facts.modalities:
        schema = model.item_schema(modality.name)
        joined.update(join_item_inputs(schema, parts))
        handled.update(schema.keys)
    for key in parts[0].keys() - handled:
        joined[key] = _concatenated([part[key] for part in parts])
    return joined


def _concatenated(values: list[Any]) -> Any:
    if all(isinstance(value, torch.Tensor) for value in values):
        return torch.cat(values, dim=0)
    return [item for value in values for item in value]


@torch.no_grad()
def _encode_together(model, requests: list[RequestItems]) -> None:
    # The requests become the rows of one prompt: items renumbered after the previous rows' items, per modality too
    spans, hashes = [], {}
    first_item, first_of_modality = 0, Counter()
    for row, request in enumerate(requests):
        items = sorted({span.item_index for span in request.spans})
        per_modality = Counter(span.modality for span in request.spans if span.feature_start == 0)
        for span in request.spans:
            spans.append(
                replace(
                    span,
                    row=row,
                    item_index=first_item + span.item_index,
                    modality_index=first_of_modality[span.modality] + span.input_index,
                )
            )
        hashes.update({first_item + index: request.hashes[index] for index in items})
        first_item += len(items)
        first_of_modality.update(per_modality)
    model_kwargs = _joined_item_inputs(model, [request.item_inputs for request in requests])
    # Items with the same content (one image in several requests) are encoded once
    first_of_hash: dict[str, int] = {}
    for index in sorted(hashes):
        first_of_hash.setdefault(hashes[index], index)
    needed = sorted(first_of_hash.values())
    features, deepstack = ItemEncoder(model, model_kwargs, spans).features(needed, hashes)
    features = {index: features[first_of_hash[hashes[index]]] for index in hashes}
    # Qwen3-VL's per-layer features travel with each item's features, to the same placeholders (an item of a modality
    # without them, the Qwen3-Omni thinker's audio, has none)
    deepstack = (
        {
            index: deepstack[first_of_hash[hashes[index]]]
            for index in hashes
            if first_of_hash[hashes[index]] in deepstack
        }
        if deepstack
        else None
    )
    first_item = 0
    for request in requests:
        items = sorted({span.item_index for span in request.spans})
        request.features = {index: features[first_item + index] for index in items}
        if deepstack is not None:
            request.deepstack = {
                index: deepstack[first_item + index] for index in items if first_item + index in deepstack
            }
        request.item_inputs = {}  # the pixels are no longer needed: free them while the request runs
        first_item += len(items)
