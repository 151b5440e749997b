"""Snapshots of a hybrid decoder's recurrent layers: read from, and restored into, transformers' own cache layers.

A Gated DeltaNet, linear-attention or short-convolution layer keeps no per-token KV: its cache layer
(`transformers.cache_utils.LinearAttentionCacheLayerMixin`) holds, per state, a convolution window (the last
`conv_kernel_size` inputs of its causal convolution) and a recurrent state (fixed size, whatever the length). A prefix
of such a decoder can be resumed only where both are known at exactly that token: a `StateSnapshot` holds them for
one batch row. Nothing here computes a state: both are copies of what the layer held after a forward that ended at
that token (`capture_recurrent_states` after each prefill forward, the cache itself at the end of the call); a layer
that records its past (`vlmprep.cache.recording`: a convolution sharing its layer with sliding-window attention) holds
every input of its convolution since its first forward, and the window is its last `conv_kernel_size` columns.
Restoring goes through the cache's own `update_conv_state` / `update_recurrent_state`, as a forward would, and then
sets the layer's own token count (transformers >= 5.25 counts tokens per linear-attention layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, LinearAttentionCacheLayerMixin

from .recording import records_past

__all__ = [
    "RecurrentCapture",
    "StateSnapshot",
    "cache_length",
    "capture_recurrent_states",
    "recurrent_layer_indices",
    "restore_snapshot",
    "snapshot_of_row",
]

# What a forward left in every state of every recurrent layer, `(layer, state) -> (conv_window, recurrent_state)`, whole
# batch: the window `(batch, ..., conv_kernel_size)` or `None` for a state without a convolution, the recurrent state
# or `None` for a state without one. A state whose window is not known there is left out.
RecurrentCapture = dict[tuple[int, int], tuple[torch.Tensor | None, torch.Tensor | None]]


@dataclass(frozen=True)
class StateSnapshot:
    """Every recurrent layer's state of one row at one token (the states after that token was fed).

    Args:
        states (`tuple`):
            `(layer_index, state_index, conv_kernel_size, conv_window, recurrent_state)` per layer state: the window
            `(channels, conv_kernel_size)` (zero-padded on the left before the first token, as transformers pads it)
            or `None` for a layer without a convolution, the recurrent state (its shape is the layer's) or `None` for
            a layer without one (LFM2's short convolutions).
    """

    states: tuple[tuple[int, int, int | None, torch.Tensor | None, torch.Tensor | None], ...]

    @property
    def nbytes(self) -> int:
        """Bytes of the stored tensors (they count in the prefix store's budget)."""
        tensors = [t for *_, conv, rec in self.states for t in (conv, rec) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)


def cache_length(cache: Cache) -> int:
    """The tokens a cache holds, as an `int`.

    transformers >= 5.25 answers `get_seq_length()` from layer 0, and a linear-attention layer answers with its 0-d
    tensor counter (`cumulative_length_linear`): positions built from it are tensors, which arithmetic takes but set
    and dict lookups (which positions are padding, which snapshots exist) silently miss.
    """
    return int(cache.get_seq_length())


def recurrent_layer_indices(cache: Cache) -> list[int]:
    """Indices of the cache layers that hold convolution or recurrent states (transformers' linear-attention layers)."""
    return [i for i, layer in enumerate(cache.layers) if isinstance(layer, LinearAttentionCacheLayerMixin)]


def capture_recurrent_states(cache: Cache, length: int) -> RecurrentCapture:
    """Copies of every convolution window and recurrent state the cache holds now, after a forward that ended at token
    `length`: the states a later call resumes from there.

    Args:
        cache (`Cache`): the call's cache, holding `length` tokens.
        length (`int`): the tokens it holds.

    Returns:
        `RecurrentCapture`
    """
    captured = {}
    for index in recurrent_layer_indices(cache):
        layer = cache.layers[index]
        for state in range(layer.number_of_states):
            conv = rec = None
            if layer.is_conv_states_initialized[state]:
                inputs = layer.conv_states[state]
                conv = _conv_window(inputs, layer.conv_kernel_size[state], length, records_past(layer))
                if conv is None:
                    continue  # not known at this token
            if layer.is_recurrent_states_initialized[state]:
                rec = layer.recurrent_states[state].detach().clone()
            captured[(index, state)] = (conv, rec)
    return captured


def snapshot_of_row(cache: Cache, row: int, length: int, captured: RecurrentCapture | None) -> StateSnapshot | None:
    """Row `row`'s snapshot from captured states, or `None` when some state there is not known.

    Args:
        cache (`Cache`): the call's cache, holding `length` tokens (its layers say which states exist).
        row (`int`): the batch row.
        length (`int`): tokens the cache holds.
        captured (`RecurrentCapture`, *optional*):
            the states captured after a prefill forward (`capture_recurrent_states`); `None`: the cache's own states,
            after its last token.

    Returns:
        `StateSnapshot` or `None`
    """
    if captured is None:
        captured = capture_recurrent_states(cache, length)
    states = []
    for index in recurrent_layer_indices(cache):
        layer = cache.layers[index]
        for state in range(layer.number_of_states):
            held = layer.is_conv_states_initialized[state] or layer.is_recurrent_states_initialized[state]
            if held and (index, state) not in captured:
                return None
            conv, rec = captured.get((index, state), (None, None))
            conv = conv[row].clone() if conv is not None else None
            rec = rec[row].clone() if rec is not None else None
            states.append((index, state, layer.conv_kernel_size[state], conv, rec))
    return StateSnapshot(tuple(states))


def _conv_window(inputs: torch.Tensor, kernel: int, length: int, recorded: bool) -> torch.Tensor | None:
    # `inputs`: (batch, channels, columns) or (batch, columns) (Qwen4-exp keeps the token ids its n-grams read as a
    # state), the last column being token `length - 1`'s input. A layer without recording holds exactly the window
    # (transformers pads a short prefill with zeros); a recording one every input since its first forward (or since
    # the window it was restored from).
    columns = inputs.shape[-1]
    if not recorded or columns >= kernel:
        return inputs[..., -kernel:].detach().clone() if columns >= kernel else None
    if length > columns or not inputs.is_floating_point():
        # The window reaches before the recorded inputs, or before token 0 in a state of token ids, which its model
        # pads with its own token (Qwen4-exp: eos), not zeros: not known
        return None
    return torch.nn.functional.pad(inputs, (kernel - columns, 0)).detach().clone()  # zeros before token 0


def restore_snapshot(cache: Cache, snapshot: StateSnapshot, length: int, device: torch.device) -> None:
    """Put a snapshot's states into a fresh cache (batch of one) through the cache's own update methods.

    Args:
        cache (`Cache`): a cache no forward has written to.
        snapshot (`StateSnapshot`): the states to resume from.
        length (`int`): the token count the snapshot was taken at.
        device (`torch.device`): where the model runs.
    """
    for index, state, kernel, conv, rec in snapshot.states:
        if conv is not None:
            cache.update_conv_state(conv[None].to(device), index, state_idx=state, conv_kernel_size=kernel)
        if rec is not None:
            cache.update_recurrent_state(rec[None].to(device), index, state_idx=state)
    for index in recurrent_layer_indices(cache):
        # transformers >= 5.25 counts each linear-attention layer's tokens (`cumulative_length_linear`, read by
        # `get_seq_length` when layer 0 is one): `update_conv_state` counted the window's columns, not the prefix
        counter = getattr(cache.layers[index], "cumulative_length_linear", None)
        if isinstance(counter, torch.Tensor):
            counter.fill_(length)  # in place: the layer marked the tensor as a static address
