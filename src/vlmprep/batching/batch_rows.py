"""The feature rows of one engine step: each scheduled slice gets exactly the rows of the placeholders it holds.

The engine packs the scheduled slices of several requests into one row of `input_ids`, one after the other, and the
model scatters `mm_encoder_outputs` into the placeholders of that row in order. So the rows are taken request by
request, in batch order, and within a request in position order (`PreparedItems.rows_between`).
"""

from __future__ import annotations

import torch

from ..generation.prepared import EncoderRows, deepstack_container
from .prompt import FIRST_PLACEHOLDER_KEY, slot_of_key


def step_encoder_outputs(model, requests_in_batch: list, input_ids: torch.Tensor) -> dict[str, EncoderRows] | None:
    """`mm_encoder_outputs` for one engine step, or `None` when no scheduled slice holds a placeholder of an image.

    A token equal to a placeholder id outside every span (the model generated it) is text, as in `generate`'s
    decoding; in a step that also feeds images the model would count it as a placeholder, so it receives as its row
    what that decoding embeds it as (itself, or the id the family's forward embeds every placeholder as), which leaves
    it unchanged (and zero deepstack rows, which add nothing).

    For a family whose encoder returns per-layer (deepstack) features (Qwen3-VL), each output also carries, per layer,
    the rows of the same placeholders, as `generate`'s prefill chunks get them.

    Args:
        model (`VisionPrepGenerationMixin`): the drop-in model the engine runs.
        requests_in_batch (`list[FutureRequestState]`): the step's slices, in the order the engine packed them.
        input_ids (`torch.Tensor` of shape `(1, num_tokens)`): the step's ids, placeholder keys not yet restored.

    Returns:
        `dict[str, EncoderRows]` or `None`
    """
    modalities = model.vision_facts.modalities
    placeholder_ids = {modality.name: modality.placeholder_id(model.config) for modality in modalities}
    # Per slice and modality, its feature rows; the step's ids are read only when some slice holds an image
    slices, has_features, num_layers = [], False, 0
    for future_state in requests_in_batch:
        state, length = future_state.state, future_state.query_length
        end = state.position_offset  # the engine moved it past this slice when it prepared the step
        items = getattr(state, "items", None)
        rows = {}
        # A slice past the request's last placeholder (every decoding step) holds no image rows
        if items is not None and end - length < items.placeholders_end:
            rows = {name: _slice_rows(items, end - length, end, name) for name in placeholder_ids}
            if any(row is not None for row in rows.values()):
                has_features, num_layers = True, max(num_layers, items.deepstack_layers)
        slices.append((length, rows))
    if not has_features:
        return None
    if not num_layers:
        # Only rows of a modality without deepstack rows (the Qwen3-Omni thinker's audio) but a generated image or video
        # placeholder: upstream reads as many deepstack layers for it as its vision tower makes (zeros: text)
        vision_config = getattr(model.config, "vision_config", None)
        num_layers = len(getattr(vision_config, "deepstack_visual_indexes", None) or ())
    ids = input_ids[0].tolist()
    # Per modality, (rows, per-layer rows or None for a generated placeholder) in the order the model fills them
    pieces: dict[str, list[tuple[torch.Tensor, list | None]]] = {name: [] for name in placeholder_ids}
    first = 0
    for length, rows in slices:
        slice_ids = ids[first : first + length]
        first += length
        counted = set()  # a placeholder id shared by modalities (GLM-4V's videos) is the first one's
        for name, placeholder_id in placeholder_ids.items():
            if rows.get(name) is not None:
                pieces[name].append(rows[name])
            generated = (
                sum(1 for token in slice_ids if token == placeholder_id) if placeholder_id not in counted else 0
            )
            counted.add(placeholder_id)
            if generated:
                _check_generated_placeholder_keeps_its_embedding(model, placeholder_id)
                pieces[name].append((_text_rows(model, placeholder_id, generated), None))
    as_list = model.vision_facts.features_as_list_by_modality()
    deepstack_targets = model.vision_facts.deepstack_targets_of(model.config)
    outputs = {}
    # A modality fed only generated placeholders in a step still needs deepstack rows, shaped like the step's others
    layer_like = next((layers[0] for rows in pieces.values() for _, layers in rows if layers is not None), None)
    if layer_like is None:  # only rows of a modality without them (audio): deepstack rows have the features' width
        layer_like = next(rows for modality_pieces in pieces.values() for rows, _ in modality_pieces)
    for name, modality_pieces in pieces.items():
        if not modality_pieces:
            continue
        like = modality_pieces[0][0]
        stacked = torch.cat([rows.to(like.device, like.dtype) for rows, _ in modality_pieces], dim=0)
        outputs[name] = EncoderRows(pooler_output=_container(stacked, as_list[name]))
        if num_layers:
            per_layer = [
                _container(_layer_rows(modality_pieces, layer, layer_like), as_list[name])
                for layer in range(num_layers)
            ]
            outputs[name].deepstack_features = deepstack_container(per_layer, deepstack_targets)
    return outputs


def _container(rows: torch.Tensor, as_list: bool) -> torch.Tensor | list[torch.Tensor]:
    return [rows] if as_list else rows.unsqueeze(0)  # (1, num_placeholders, dim)


def _slice_rows(items, start: int, end: int, modality: str) -> tuple[torch.Tensor, list | None] | None:
    # A slice's feature rows of one modality, and its per-layer deepstack rows (None when the encoder has none)
    rows = items.rows_between(start, end, modality)
    if rows is None:
        return None
    # Only a modality whose items carry them has deepstack rows (the Qwen3-Omni thinker's audio has none)
    with_layers = any(span.item_index in (items.deepstack or {}) for span in items.spans if span.modality == modality)
    if not with_layers:
        return rows, None
    layers = [items.rows_between(start, end, modality, layer) for layer in range(items.deepstack_layers)]
    return rows, layers or None


def _layer_rows(pieces: list[tuple[torch.Tensor, list | None]], layer: int, like: torch.Tensor) -> torch.Tensor:
    # One deepstack layer's rows of a step: a generated placeholder adds zeros (its text embedding stays as it is)
    parts = [
        layers[layer] if layers is not None else like.new_zeros(rows.shape[0], like.shape[-1])
        for rows, layers in pieces
    ]
    return torch.cat([part.to(like.device, like.dtype) for part in parts], dim=0)  # (placeholders of the step, dim)


def restore_placeholders(model, input_ids: torch.Tensor) -> None:
    """Turn the placeholder keys of a step's `input_ids` back into placeholder ids, in place."""
    modalities = model.vision_facts.modalities
    keyed = input_ids <= FIRST_PLACEHOLDER_KEY
    if len(modalities) == 1:
        input_ids.masked_fill_(keyed, modalities[0].placeholder_id(model.config))
        return
    slots = torch.tensor([slot_of_key(k, len(modalities)) for k in input_ids[keyed].tolist()], dtype=input_ids.dtype)
    placeholder_ids = torch.tensor([m.placeholder_id(model.config) for m in modalities], dtype=input_ids.dtype)
    input_ids[keyed] = placeholder_ids[slots.long()].to(input_ids.device)


def _check_generated_placeholder_keeps_its_embedding(model, token_id: int) -> None:
    # A model whose features are only deepstack pairs (Granite 4 Vision) zeroes every placeholder's embedding in a
    # forward that feeds images: no row given here brings a generated placeholder's text embedding back, as it would
    # be in `generate`'s decoding (which feeds no images). Refused rather than answered wrong.
    if model.vision_facts.features_key is None:
        raise ValueError(
            f"A request generated the image placeholder token ({token_id}) in an engine step that also feeds another "
            f"request's images; {type(model).__name__} zeroes every placeholder's embedding in such a step, so the "
            "generated token would not be read as text. Pass `suppress_tokens` with the placeholder id in the "
            "generation config, or use `generate` for this request."
        )


def _text_rows(model, token_id: int, count: int) -> torch.Tensor:
    # What `generate`'s decoding embeds a generated placeholder as: the token itself, or the id a family's forward
    # embeds every placeholder as (its placement's `placeholders_embedded_as`: Muse Spark's 0, Gemma 4's pad token)
    embedded_as = next(
        (m.placement.embedded_as(model.config) for m in model.vision_facts.modalities if m.placement is not None),
        None,
    )
    embeddings = model.get_input_embeddings()
    token_id = token_id if embedded_as is None else embedded_as
    ids = torch.full((count,), token_id, dtype=torch.long, device=embeddings.weight.device)
    return embeddings(ids)  # (count, hidden): what the model embeds the token as, so scattering it changes nothing


def step_position_ids(requests_in_batch: list, num_tokens: int) -> torch.Tensor | None:
    """`(rows, 1, num_tokens)` position ids of a step holding a request with multimodal positions, else `None`.

    The engine feeds `position_offset + i`; a request whose prompt has multimodal rotary positions gets its own
    (`RequestItems.position_ids`), every other request of the step its 1D positions on every row. Padding (up to
    `num_tokens`) gets 0.

    Args:
        requests_in_batch (`list[FutureRequestState]`): the step's slices, in the order the engine packed them.
        num_tokens (`int`): the step's number of query tokens, padding included.

    Returns:
        `torch.Tensor` or `None`
    """
    if not any(
        getattr(future.state, "items", None) is not None and future.state.items.positions is not None
        for future in requests_in_batch
    ):
        return None  # no tensor built for a step of 1D positions only (upstream's own)
    pieces, rows = [], None
    for future_state in requests_in_batch:
        state, length = future_state.state, future_state.query_length
        end = state.position_offset
        items = getattr(state, "items", None)
        if items is not None and items.positions is not None:
            pieces.append(items.position_ids(end - length, end))
            rows = items.positions.shape[0]
        else:
            pieces.append(torch.arange(end - length, end)[None])
    if rows is None:
        return None
    # Float when a request's rotary positions are (the Qwen3-Omni thinker's video times may fall between integers)
    dtype = torch.float32 if any(piece.is_floating_point() for piece in pieces) else torch.long
    positions = torch.zeros(rows, 1, num_tokens, dtype=dtype)
    first = 0
    for piece in pieces:
        positions[:, 0, first : first + piece.shape[-1]] = piece  # a 1D piece is broadcast over the rows
        first += piece.shape[-1]
    return positions
