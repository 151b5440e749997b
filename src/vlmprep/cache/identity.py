"""The identity of a model in cache keys: everything besides the inputs that cached features and KV depend on.

An encoder-cache entry (one image's features) or a prefix-cache block (KV) is valid only for the weights, the autocast
state, the train/eval mode and the attention implementation it was computed under. [`cache_identity`] gives a tuple of
strings that changes whenever one of them changes, checked cheaply on every call:

- **weights**: a fingerprint of every parameter and buffer of the part of the model that matters ([`weights_fingerprint`]):
  storage, data pointer, version counter, dtype, device, shape, strides, plus a few sampled elements of each tensor.
  The version counter catches in-place writes that autograd sees (`load_state_dict`, `optimizer.step()`,
  `with torch.no_grad(): p.copy_(...)`); the storage and pointer catch replaced tensors (`p.data = ...`, `model.half()`,
  `model.to(...)`); the sampled elements catch in-place writes the version counter does not see (`p.data.mul_(...)`,
  an adapter merged with `p.data += delta`, fused optimizer kernels), which change every element of a tensor.
  An edit of a few elements through `p.data` (or through a numpy or DLPack alias) is invisible to all of these: call
  `model.encoder_cache.clear()` (and `PrefixCache.clear()`) after one. Inference tensors (a model built or loaded
  under `torch.inference_mode()`) have no version counter: for them an in-place write is seen through the sampled
  elements only (a write to every element, as `load_state_dict` or `p.copy_(...)` makes, is seen; a write to a few
  elements is not).
- **autocast**: whether autocast is on, and its dtype, for the device types holding the weights;
- **mode**: whether any module of the part is in training mode;
- **attention**: the attention implementation of the config and each sub-config (SDPA and eager round differently);
- **adapters**: the state of every PEFT tuner layer (LoRA and the other `BaseTunerLayer`s) in the part, which changes
  `forward` without changing a tensor: adapters enabled or disabled (`disable_adapter()`), the active adapters
  (`set_adapter`), the merged ones (`merge_adapter()`/`unmerge_adapter()`, whose weight writes the fingerprint sees
  too) and each adapter's scale (`set_scale`). Adding or deleting an adapter adds or removes its tensors. A call with
  per-row adapters (`adapter_names=`, `alora_offsets=`: forward pre-hooks on the tuner layers for that call) gets an
  identity of its own, so nothing is served to it or from it. Invisible: forward hooks on other modules, a patched
  `forward`, and state of other adapter libraries that changes `forward` without a tensor: set
  `model.encoder_cache = None` and pass no `prefix_cache` while one is in place.

The fingerprint becomes a token in cache keys through [`WeightsEpochs`]: a fresh random token whenever the fingerprint
differs from the one seen last, so a token is never reused for other weights (even when freed memory is reallocated at
the same address) and a copied or unpickled model never shares a token with its original.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from .module_state import adapter_state, any_module_training, attention_state, is_adapter_layer

__all__ = [
    "WeightsEpochs",
    "any_module_training",
    "cache_identity",
    "check_cache_salt",
    "part_modules",
    "salt_namespace",
    "weights_fingerprint",
]

# The parts of a model a cache can depend on: the encoder cache only on what encodes images (everything but the
# language model and its output head), the prefix cache on everything.
PARTS = ("vision", "model")
# Elements sampled per tensor: enough to see a write to every element, few enough to cost one small gather.
_SAMPLED_ELEMENTS = 8
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_EPOCHS_KEY = "_vlmprep_weights_epochs"
_VIEWS_KEY = "_vlmprep_sample_views_"


def part_modules(model: nn.Module, part: str = "vision") -> tuple[nn.Module, tuple[nn.Module, ...]]:
    """The module a part of `model` lives in, and the submodules left out of it.

    Args:
        model (`nn.Module`): a drop-in model.
        part (`str`, *optional*, defaults to `"vision"`):
            `"vision"`: what computes image features (the model without its language model and output head);
            `"model"`: every parameter and buffer.

    Returns:
        `tuple[nn.Module, tuple[nn.Module, ...]]`: `(root, skipped)`. A tensor reachable from `root` without entering
        a skipped module belongs to the part, even when a skipped module shares it.
    """
    if part not in PARTS:
        raise ValueError(f"`part` must be one of {PARTS}, got {part!r}.")
    if part == "model":
        return model, ()
    skipped = []
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    # `get_decoder` falls back to the model (or its base model) when it finds no language model: the vision tower
    # then lives inside it, and leaving it out would fingerprint nothing. Everything is kept instead.
    if decoder is not None and decoder is not model and decoder is not getattr(model, "base_model", None):
        skipped.append(decoder)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if isinstance(head, nn.Module):
        skipped.append(head)
    return model, tuple(skipped)


def _part_state(root: nn.Module, skipped: Iterable[nn.Module]) -> tuple[list[torch.Tensor], bool, str]:
    """The distinct tensors of a part, whether any of its modules is in training mode, and its adapters' state."""
    skipped_ids = {id(module) for module in skipped}
    tensors: dict[int, torch.Tensor] = {}
    training = False
    adapters = []
    stack = [root]
    while stack:
        module = stack.pop()
        if is_adapter_layer(type(module)):
            adapters.append(adapter_state(module))
        # Read from the instance dict: an attribute lookup first searches the class hierarchy (long for transformers
        # classes), and this runs for every module on every call.
        state = module.__dict__
        training = training or state["training"]
        for group in (state["_parameters"], state["_buffers"]):
            for tensor in group.values():
                if tensor is not None:
                    tensors[id(tensor)] = tensor  # tied weights count once, where first seen
        for child in state["_modules"].values():
            if child is not None and id(child) not in skipped_ids:
                stack.append(child)
    # One digest of every adapter layer's state, in walk order (the same for the same model structure)
    digest = hashlib.blake2b(repr(adapters).encode(), digest_size=16).hexdigest() if adapters else ""
    return list(tensors.values()), training, f"adapters({digest})"


def _places(tensors: list[torch.Tensor]) -> tuple:
    """Where each tensor's elements are: storage, pointer, offset, dtype, device, shape, strides (not the version)."""
    return tuple(
        (
            tensor.untyped_storage()._cdata if not tensor.is_meta else 0,
            tensor.data_ptr(),
            tensor.storage_offset(),
            tensor.dtype,
            tensor.device,
            tensor.shape,
            tensor.stride(),
        )
        for tensor in tensors
    )


def _sample_groups(tensors: list[torch.Tensor], places: tuple) -> list[list]:
    """The sampling views of every tensor that has one, as integers, grouped by device and dtype (one gather each).

    On the CPU the views are numpy arrays sharing the tensors' memory: joining a few dozen of them costs a fraction of
    one `torch.cat`. They are read only after `_places` found every tensor where it was when they were made (a view
    holds its tensor's storage, and a storage moved by `resize_` changes its data pointer).
    """
    groups: dict[tuple, list] = {}
    for tensor, place in zip(tensors, places, strict=True):
        sample = _sample_view(tensor)
        if sample is not None:
            sample = sample.view(_INT_OF_SIZE[sample.element_size()])  # the integer view makes comparisons bitwise
            groups.setdefault((place[4], place[3]), []).append(
                sample.numpy() if sample.device.type == "cpu" else sample
            )
    return list(groups.values())


def _sampled_elements(groups: list[list]) -> tuple[bytes, ...]:
    """The current values of the sampling views, as bytes (exact, and NaN compares equal to itself)."""
    with torch.no_grad():
        return tuple(
            np.concatenate(group).tobytes()
            if isinstance(group[0], np.ndarray)
            else torch.cat(group).cpu().numpy().tobytes()
            for group in groups
        )


def _sample_view(tensor: torch.Tensor) -> torch.Tensor | None:
    """A `(count,)` strided view of up to `_SAMPLED_ELEMENTS` elements spread over the tensor, or `None`."""
    if tensor.device.type == "meta" or tensor.element_size() not in _INT_OF_SIZE or tensor.is_quantized:
        return None
    if tensor.numel() == 0:
        return None
    # The tensor's own span of its storage (a view into a larger storage is sampled inside itself); a write to
    # every element is seen at each sampled one.
    if tensor.is_contiguous():
        extent = tensor.numel()
    else:
        extent = 1 + sum((size - 1) * step for size, step in zip(tensor.shape, tensor.stride(), strict=True))
    count = min(_SAMPLED_ELEMENTS, extent)
    stride = max(1, (extent - 1) // max(count - 1, 1))
    return tensor.detach().as_strided((count,), (stride,), tensor.storage_offset())  # (count,)


class SampleViews:
    """The sampling views of a model's tensors, kept on the model between calls while their places stay the same.

    A view of the same memory reads its current values, so the views are made once per layout of the tensors and read
    again on every call: making them (one strided view per tensor) was most of a fingerprint's cost. A copy
    (`copy.deepcopy`, pickle) starts empty: its views would read the original's memory.
    """

    def __init__(self):
        self.places: tuple | None = None  # `_places` of the tensors the views were made for
        self.groups: list[list] = []
        self.device_types: tuple[str, ...] = ()

    def groups_for(self, tensors: list[torch.Tensor], places: tuple) -> list[list]:
        """The sampling views of `tensors` (at `places`), made again only when a place changed."""
        if places != self.places:
            # Views of tensors no longer in the model are let go here: they kept the old memory alive.
            self.groups = _sample_groups(tensors, places)
            self.device_types = tuple(sorted({place[4].type for place in places}))
            self.places = places
        return self.groups

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()


def weights_fingerprint(module: nn.Module, skip: Iterable[nn.Module] = ()) -> tuple:
    """A fingerprint of the parameters and buffers of `module` (outside `skip`) that changes when the weights do.

    Per tensor: storage address, data pointer, storage offset, version counter, dtype, device, shape and strides, then
    a few sampled elements of each tensor. Costs a walk over the modules and one small gather per dtype, independent
    of the size of the tensors. See the module docstring for what it sees and what it cannot.

    Args:
        module (`nn.Module`): the module whose tensors are fingerprinted.
        skip (`Iterable[nn.Module]`, *optional*): submodules left out (with everything below them).

    Returns:
        `tuple`: equal for two calls exactly when nothing it covers changed in between.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.cache.identity import weights_fingerprint
    >>> layer = torch.nn.Linear(4, 4)
    >>> before = weights_fingerprint(layer)
    >>> before == weights_fingerprint(layer)
    True
    >>> _ = layer.weight.data.mul_(2)  # invisible to the version counter, seen by the sampled elements
    >>> before == weights_fingerprint(layer)
    False

    ```
    """
    tensors, _, _ = _part_state(module, skip)
    return _fingerprint(tensors)


def _versions(tensors: list[torch.Tensor]) -> tuple[int, ...]:
    try:
        return tuple(tensor._version for tensor in tensors)
    except RuntimeError:
        # Inference tensors (made under `torch.inference_mode()`) have no version counter: for them only the places
        # and the sampled elements are compared.
        return tuple(-1 if tensor.is_inference() else tensor._version for tensor in tensors)


def _fingerprint(tensors: list[torch.Tensor], views: SampleViews | None = None) -> tuple:
    places = _places(tensors)
    versions = _versions(tensors)
    groups = views.groups_for(tensors, places) if views is not None else _sample_groups(tensors, places)
    return places, versions, _sampled_elements(groups)


class WeightsEpochs:
    """Per-model tokens for the weights of each part: a new token whenever a part's fingerprint changes.

    Lives on the model. A token is never handed out for two different fingerprints, so entries keyed by an old token
    are never served again once the weights changed, even if the weights later return to an earlier fingerprint. A
    copy (`copy.deepcopy`, pickle, `torch.save`) starts empty: the copy gets tokens of its own.

    Example:

    ```python
    >>> from vlmprep.cache.identity import WeightsEpochs
    >>> epochs = WeightsEpochs()
    >>> first = epochs.token("vision", ("fingerprint", 1))
    >>> first == epochs.token("vision", ("fingerprint", 1)), first == epochs.token("vision", ("fingerprint", 2))
    (True, False)

    ```
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._last: dict[str, tuple[tuple, str]] = {}  # part -> (fingerprint, token)

    def token(self, part: str, fingerprint: tuple) -> str:
        """The token of `fingerprint` for `part`: the last one if the fingerprint is unchanged, else a new one.

        Args:
            part (`str`): which part of the model the fingerprint covers.
            fingerprint (`tuple`): the part's current [`weights_fingerprint`].

        Returns:
            `str`: a token (a random hex string).
        """
        with self._lock:
            last = self._last.get(part)
            if last is not None and last[0] == fingerprint:
                return last[1]
            token = uuid.uuid4().hex
            self._last[part] = (fingerprint, token)
            return token

    def __getstate__(self) -> dict:
        # A lock cannot be pickled, and a copy must not share tokens with its original: a copy starts empty.
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()


def _autocast_state(device_types: Iterable[str]) -> str:
    states = []
    for device_type in sorted(set(device_types)):
        try:
            enabled = torch.is_autocast_enabled(device_type)
        except RuntimeError:  # a device type autocast does not know (e.g. "meta")
            continue
        if enabled:
            states.append(f"{device_type}:{torch.get_autocast_dtype(device_type)}")
    return "autocast(" + ",".join(states) + ")"


def cache_identity(model: nn.Module, part: str = "vision") -> tuple[str, str, str, str, str]:
    """The identity of `model` in cache keys: weights token, autocast state, mode, adapter and attention state.

    Entries made under one identity are never served under another. Cheap enough for every call (see
    [`weights_fingerprint`]); the weights token comes from the [`WeightsEpochs`] stored on the model.

    Args:
        model (`nn.Module`): a drop-in model.
        part (`str`, *optional*, defaults to `"vision"`):
            `"vision"` for the encoder cache (features depend only on the vision tower and projector), `"model"` for
            the prefix cache (KV depends on every weight).

    Returns:
        `tuple[str, str, str, str, str]`: `(weights token, autocast state, "train" or "eval", adapter state,
        attention state)`; the adapter state is a digest of every PEFT tuner layer's state (see the module docstring),
        `"adapters()"` without one; the attention state names the attention implementations (`attention_state`).

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.cache.identity import cache_identity
    >>> model = torch.nn.Linear(4, 4).eval()
    >>> before = cache_identity(model, part="model")
    >>> before == cache_identity(model, part="model")
    True
    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     before == cache_identity(model, part="model")
    False

    ```
    """
    root, skipped = part_modules(model, part)
    tensors, training, adapters = _part_state(root, skipped)
    epochs = model.__dict__.get(_EPOCHS_KEY)
    if epochs is None:
        epochs = model.__dict__.setdefault(_EPOCHS_KEY, WeightsEpochs())
    views = model.__dict__.get(_VIEWS_KEY + part)
    if views is None:
        views = model.__dict__.setdefault(_VIEWS_KEY + part, SampleViews())
    token = epochs.token(part, _fingerprint(tensors, views))
    autocast = _autocast_state(views.device_types)
    return token, autocast, "train" if training else "eval", adapters, attention_state(model)


def check_cache_salt(salt: object) -> str | None:
    """`salt` if it is a valid `cache_salt` (`None` or a `str`), else a `TypeError` naming the fix.

    Args:
        salt (`object`): the `cache_salt` passed to `generate`.

    Returns:
        `str` or `None`: `salt`, unchanged.
    """
    if salt is None or isinstance(salt, str):
        return salt
    raise TypeError(
        f"`cache_salt` must be a str (or None for no salt), got {type(salt).__name__} {salt!r}. Pass a string, e.g. "
        f"`cache_salt=str(tenant_id)`."
    )


def salt_namespace(salt: str | None) -> str:
    """The salt's part of a prefix-cache namespace: `None` and every string (`"None"`, `""` included) differ.

    Args:
        salt (`str`, *optional*): a checked `cache_salt`.

    Returns:
        `str`: `"-"` for no salt, `"+"` followed by the salt otherwise.
    """
    return "-" if check_cache_salt(salt) is None else "+" + salt
