"""One request's prompt for continuous batching: its token ids, its images and the block keys of its placeholders.

transformers' engine keys prefix sharing on token ids alone (`compute_block_hash(parent, tokens)`), so two prompts
with identical placeholders and different images would share KV. Inside the engine a request's prompt therefore
carries *placeholder keys* instead of placeholder ids: negative ids derived from the image's content hash (the same
hash the encoder cache and `PrefixCache` key on) and the feature row the placeholder receives. Block hashes then
cover the images; the real placeholder ids are put back in every forward's `input_ids` before the model runs, and
in the prompt ids a request's output reports.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..cache.hashing import hash_item_inputs
from ..generation.encoding import ItemEncoder, check_finite_pixels
from ..generation.items import select_items
from ..generation.plan import bidirectional_blocks, check_items_match_spans, find_item_spans
from ..generation.prepared import PreparedItems
from ..generation.spans import ItemSpan
from .support import check_batching_support

# Keys are <= -2: upstream marks a decode slot whose token is not known yet with -1 (`TMP_TOKEN_ID`).
FIRST_PLACEHOLDER_KEY = -2
# int32 holds the ids the engine stores; keys use the 2**31 - 2 values from -2 down to -(2**31 - 1).
_KEY_VALUES = 2**31 - 2
# Per-request inputs that only describe the prompt: accepted, checked, and not needed by the engine.
_PROMPT_KEYS = ("input_ids", "attention_mask")


@dataclass
class RequestItems:
    """The images of one continuous-batching request: spans, per-item inputs, content hashes and, once admitted,
    per-item features.

    Args:
        spans (`list[ItemSpan]`): the spans of the request's prompt (row 0), every modality.
        item_inputs (`dict[str, Any]`): the request's pixel inputs and per-item extras, as the model's processor returns
            them.
        hashes (`dict[int, str]`): content hash of each item (salted), by image index.
        placeholder_ids (`tuple[int, ...]`): the placeholder id of each modality, in `VisionFacts.modalities` order.
        as_list (`dict[str, bool]`): per modality, whether the model reads its features as a list of tensors.
        positions (`torch.Tensor`, *optional*):
            `(rows, prompt_length)` position ids of the prompt, for families with multimodal rotary positions
            (`vision_position_ids`); every row after the prompt continues from the row's last value + 1.
        features (`dict[int, torch.Tensor]`, *optional*): `(tokens, dim)` features of each item, set at admission.
        deepstack (`dict[int, tuple[torch.Tensor, ...]]`, *optional*):
            per item whose encoder returns per-layer extra features (Qwen3-VL's deepstack), one `(tokens, dim)` tensor
            per layer, set at admission; fed to the same placeholders as `features`.
        blocks (`tuple[tuple[int, int], ...]`, *optional*, defaults to `()`):
            `(start, end)` of each bidirectional block of the prompt (Gemma3's image runs), which no slice may end
            inside and whose tokens attend to each other (`vlmprep.batching.blocks`).
    """

    spans: list[ItemSpan]
    item_inputs: dict[str, Any]
    hashes: dict[int, str]
    placeholder_ids: tuple[int, ...]
    as_list: dict[str, bool]
    positions: torch.Tensor | None = None
    features: dict[int, torch.Tensor] | None = None
    deepstack: dict[int, tuple[torch.Tensor, ...]] | None = None
    blocks: tuple[tuple[int, int], ...] = ()
    _prepared: PreparedItems | None = field(default=None, repr=False)

    @property
    def modalities(self) -> list[str]:
        """The modalities of the request's items, in the order their rows are fed."""
        return list(dict.fromkeys(span.modality for span in self.spans))

    @functools.cached_property
    def placeholders_end(self) -> int:
        """One past the prompt's last placeholder: a slice starting there or later holds no feature row (read every
        step, computed once)."""
        return max(span.end for span in self.spans) if self.spans else 0

    @property
    def deepstack_layers(self) -> int:
        """How many per-layer (deepstack) features each item has; 0 when the encoder returns none."""
        return len(next(iter(self.deepstack.values()))) if self.deepstack else 0

    def rows_between(self, start: int, end: int, modality: str, layer: int | None = None) -> torch.Tensor | None:
        """Feature rows of the placeholders in positions `[start, end)` of the prompt, in placeholder order.

        Args:
            start (`int`): first position of the slice.
            end (`int`): one past its last position.
            modality (`str`): whose placeholders.
            layer (`int`, *optional*): a deepstack layer's rows instead of the features.

        Returns:
            `torch.Tensor` of shape `(num_placeholders, dim)`, or `None` when the slice holds none.
        """
        if self.features is None:
            raise RuntimeError("The request's images were not encoded at admission.")
        if self._prepared is None:
            self._prepared = PreparedItems(
                spans=self.spans, features=self.features, as_list=self.as_list, deepstack=self.deepstack or {}
            )
        return self._prepared.rows_between(start, end, modality, layer)

    def position_ids(self, start: int, end: int) -> torch.Tensor:
        """`(rows, end - start)` position ids of positions `[start, end)`: the prompt's own, then generated tokens'.

        A generated token at position `p` gets `p` on a text row (the rows before the last 3) and `p + delta` on the
        3 rotary rows, `delta` being the rotary rows' maximum + 1 - prompt length, as upstream decoding numbers them.
        """
        positions = self.positions
        length = positions.shape[-1]
        inside = positions[:, start : min(end, length)]
        if end <= length:
            return inside
        generated = torch.arange(max(start, length), end).expand(positions.shape[0], -1)  # (rows, generated)
        delta = positions[-3:].max() + 1 - length
        shift = torch.zeros(positions.shape[0], 1, dtype=positions.dtype)
        shift[-3:] = delta
        return torch.cat([inside, generated + shift], dim=-1)

    def restore_ids(self, ids: Sequence[int]) -> list[int]:
        """Token ids with every placeholder key turned back into its placeholder id."""
        return [
            self.placeholder_ids[slot_of_key(i, len(self.placeholder_ids))] if i <= FIRST_PLACEHOLDER_KEY else i
            for i in ids
        ]


class ItemPrompt(list):
    """A request's prompt as the engine stores it (token ids, placeholder keys in place of placeholders), with its
    images; or, for a request that failed its checks, the reason, so it fails alone.

    A list, so upstream's `generate_batch` and `add_requests` size and sort it as they do any prompt.

    Args:
        ids (`Sequence[int]`): the engine's token ids.
        items (`RequestItems`, *optional*): the request's items; `None` for a text-only prompt.
        error (`str`, *optional*): why the request cannot run.
    """

    def __init__(self, ids: Sequence[int], items: RequestItems | None = None, error: str | None = None):
        super().__init__(ids)
        self.items = items
        self.error = error


def slot_of_key(key: int, num_modalities: int) -> int:
    """The modality slot (index in `VisionFacts.modalities`) a placeholder key stands for."""
    return (FIRST_PLACEHOLDER_KEY - key) % num_modalities


def placeholder_keys(item_hash: str, rows: range, slot: int, num_modalities: int) -> list[int]:
    """Placeholder keys of an item's feature rows: distinct per (content hash, row), carrying the modality slot.

    Args:
        item_hash (`str`): the item's content hash.
        rows (`range`): the item's feature rows the placeholders receive.
        slot (`int`): the modality slot.
        num_modalities (`int`): how many modalities the family has.

    Returns:
        `list[int]`: one key per row, each in `[-(2**31 - 1), -2]`.
    """
    per_slot = _KEY_VALUES // num_modalities
    keys = []
    for row in rows:
        digest = hashlib.blake2b(f"{item_hash}:{row}".encode(), digest_size=8).digest()
        keys.append(FIRST_PLACEHOLDER_KEY - slot - num_modalities * (int.from_bytes(digest, "little") % per_slot))
    return keys


def split_request(request: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A request given as a mapping (a processor's output): its `input_ids` and its other inputs.

    Args:
        request (`Mapping[str, Any]`): `input_ids` and the request's pixel inputs.

    Returns:
        `tuple[Any, dict[str, Any]]`: the `input_ids`, and every other entry.

    Raises:
        `ValueError`: the mapping has no `input_ids`.
    """
    if "input_ids" not in request:
        raise ValueError("A request given as a mapping needs its `input_ids`.")
    return request["input_ids"], {key: value for key, value in request.items() if key != "input_ids"}


def token_list(input_ids: Any) -> list[int]:
    """A request's `input_ids` (a list, or a tensor of shape `(seq_len,)` or `(1, seq_len)`) as a list of ints."""
    if isinstance(input_ids, torch.Tensor):
        if input_ids.ndim == 2 and input_ids.shape[0] == 1:
            input_ids = input_ids[0]
        if input_ids.ndim != 1 or input_ids.is_floating_point():
            raise ValueError(
                f"A request's `input_ids` must be integer ids of one prompt, shape (seq_len,) or (1, seq_len), got "
                f"shape {tuple(input_ids.shape)} ({input_ids.dtype}). Pass one dict per request."
            )
        input_ids = input_ids.tolist()
    if not isinstance(input_ids, Sequence) or isinstance(input_ids, (str, bytes)):
        raise TypeError(f"A request's `input_ids` must be a list of ints or a tensor, got {type(input_ids).__name__}.")
    ids = list(input_ids)
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ValueError("A request's `input_ids` must be a non-empty list of non-negative token ids.")
    return ids


def request_input_keys(facts) -> set[str]:
    """Every input a request may carry besides its `input_ids`: what the family's forward reads per request or per item.

    The attention mask and token types (per token), each modality's pixel inputs, per-item extras (hashed with the
    features) and per-item position inputs (`ModalityFacts.position_keys`, which key the request's pages).

    Args:
        facts (`VisionFacts`): the family's facts.

    Returns:
        `set[str]`
    """
    keys = {*_PROMPT_KEYS, facts.token_type_key}
    for modality in facts.modalities:
        keys.update((*modality.item_keys, *modality.position_keys))
    return keys


def build_item_prompt(
    model, input_ids: Any, inputs: Mapping[str, Any], salt: str | None = None, hints: dict | None = None
) -> ItemPrompt:
    """Check one request and turn it into the engine's prompt: placeholder keys, spans, per-item inputs, hashes.

    Args:
        model (`VisionPrepGenerationMixin`): the drop-in model the engine runs.
        input_ids (`list[int]` or `torch.Tensor`): the prompt.
        inputs (`Mapping[str, Any]`): the request's other processor outputs (pixel inputs, grids, attention mask).
        salt (`str`, *optional*): isolates the request's hashes (and so its shared blocks) from other salts.
        hints (`dict`, *optional*): the caller's names for the request's items (`vlmprep.cache.hash_hints`).

    Returns:
        `ItemPrompt`

    Raises:
        `ValueError` or `TypeError`: the request cannot run (unknown inputs, placeholders and images that do not match,
        pixels of the wrong shape or not finite), with what to fix.
    """
    ids = token_list(input_ids)
    facts = model.vision_facts
    accepted = request_input_keys(facts)
    unknown = sorted(set(inputs) - accepted)
    if unknown:
        raise ValueError(
            f"Unknown request inputs {unknown} for continuous batching. A request takes `input_ids` and the pixel "
            f"inputs its processor returns ({sorted(accepted - set(_PROMPT_KEYS))}); pass generation options through "
            "the `generation_config`."
        )
    attention_mask = inputs.get("attention_mask")
    if attention_mask is not None and token_list(attention_mask) != [1] * len(ids):
        raise ValueError(
            "A request's `attention_mask` must be all ones over its `input_ids`: the engine batches unpadded prompts. "
            "Pass each request unpadded (one processor call per request)."
        )
    model_kwargs = {key: value for key, value in inputs.items() if key not in _PROMPT_KEYS and value is not None}
    prompt = torch.tensor([ids])
    spans = find_item_spans(model, prompt, model_kwargs, model_kwargs.get(facts.token_type_key))
    check_items_match_spans(model, spans, model_kwargs, past_length=0)
    if not spans:
        return ItemPrompt(ids)
    check_batching_support(model, with_items=True)
    modalities = facts.modalities
    for modality in modalities:
        check_finite_pixels(model_kwargs, modality.pixel_keys)
    indices = sorted({span.item_index for span in spans})
    hashes = ItemEncoder(model, model_kwargs, spans, salt, hints).hashes(indices)
    slots = {modality.name: slot for slot, modality in enumerate(modalities)}
    blocks = _image_blocks(model, prompt, model_kwargs.get(facts.token_type_key))
    key_hashes = _key_hashes(ids, spans, blocks, _with_positions(model, model_kwargs, spans, hashes))
    keyed = list(ids)
    for span, key_hash in zip(spans, key_hashes, strict=True):
        rows = range(span.feature_start, span.feature_start + span.length)
        keyed[span.start : span.end] = placeholder_keys(key_hash, rows, slots[span.modality], len(slots))
    positions = model.vision_position_ids(prompt, model_kwargs)  # (rows, 1, prompt_length) or None
    positions = positions[:, 0] if positions is not None else None
    items = RequestItems(
        spans=spans,
        positions=positions,
        blocks=blocks,
        item_inputs=model_kwargs,
        hashes=hashes,
        placeholder_ids=tuple(modality.placeholder_id(model.config) for modality in modalities),
        as_list=facts.features_as_list_by_modality(),
    )
    return ItemPrompt(keyed, items)


def _image_blocks(model, prompt: torch.Tensor, token_types: Any) -> tuple[tuple[int, int], ...]:
    # The blocks `generate` builds: from the caller's token types; none without them (causal, as upstream's forward)
    if model.vision_facts.bidirectional != "image" or token_types is None:
        return ()
    token_types = torch.as_tensor(token_types)
    if token_types.numel() != prompt.shape[-1]:
        key = model.vision_facts.token_type_key
        raise ValueError(f"A request's `{key}` must have one entry per input id ({prompt.shape[-1]}).")
    return tuple((block.start, block.end) for block in bidirectional_blocks(model, token_types.reshape(1, -1), None))


def _with_positions(model, model_kwargs: dict[str, Any], spans: list[ItemSpan], hashes: dict[int, str]) -> dict:
    # The KV of an item's placeholders (and of every token after them) depends on its position inputs as well: two
    # requests with the same video at other frame spacings must not share pages. The content hashes themselves key
    # the encoder cache, which these inputs do not concern.
    keyed = dict(hashes)
    for span in spans:
        keys = model.vision_facts.modality(span.modality).position_keys
        present = {key: model_kwargs[key] for key in keys if model_kwargs.get(key) is not None}
        if present and span.feature_start == 0:
            values = {key: select_items(value, [span.input_index]) for key, value in present.items()}
            keyed[span.item_index] = hash_item_inputs({"item": hashes[span.item_index], **values})
    return keyed


def _key_hashes(ids: list[int], spans: list[ItemSpan], blocks, hashes: dict[int, str]) -> list[str]:
    # Per span, what its placeholder keys derive from. A page shared from another request ending inside a
    # bidirectional block holds KV computed with the rest of that block visible, so inside a block the keys cover the
    # whole block (its ids and every image in it): two images in one block (no text between them) are shared only
    # together. Outside blocks the image's own hash decides (a block of one image is keyed as selectively).
    key_hashes = [hashes[span.item_index] for span in spans]
    for start, end in blocks:
        inside = [index for index, span in enumerate(spans) if span.start < end and start < span.end]
        if not inside:
            continue
        content = (ids[start:end], [hashes[spans[index].item_index] for index in inside])
        digest = hashlib.blake2b(repr(content).encode(), digest_size=16).hexdigest()
        for index in inside:
            key_hashes[index] = f"{digest}:{key_hashes[index]}"
    return key_hashes
