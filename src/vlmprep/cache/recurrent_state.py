"""Snapshots of a hybrid decoder's recurrent layers: read from, and restored into, transformers' own cache layers.

A Gated DeltaNet, linear-attention or short-convolution layer keeps no per-token KV: its cache layer
(`transformers.cache_utils.LinearAttentionCacheLayerMixin`) holds, per state, a convolution window (the last
`conv_kernel_size` inputs of its causal convolution) and a recurrent state (fixed size, whatever the length). A prefix
of such a decoder can be resumed only where both are known at exactly that token: a `StateSnapshot` holds them for
one batch row. Nothing here computes a state: the recurrent state is a copy of what the layer held after a forward
that ended at that token, and the convolution window is cut out of the inputs the layer recorded (a cache whose
`activate_past_recording` was called keeps every input of its convolution, not only the last window). Restoring goes
through the cache's own `update_conv_state` / `update_recurrent_state`, as a forward would.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, LinearAttentionCacheLayerMixin

__all__ = [
    "RecurrentCapture",
    "StateSnapshot",
    "capture_recurrent_states",
    "recurrent_layer_indices",
    "restore_snapshot",
    "snapshot_of_row",
]

# What a forward left in one recurrent state of every recurrent layer: `(layer, state) -> (batch, ...)` copies.
RecurrentCapture = dict[tuple[int, int], torch.Tensor]


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


def recurrent_layer_indices(cache: Cache) -> list[int]:
    """Indices of the cache layers that hold convolution or recurrent states (transformers' linear-attention layers)."""
    return [i for i, layer in enumerate(cache.layers) if isinstance(layer, LinearAttentionCacheLayerMixin)]


def capture_recurrent_states(cache: Cache) -> RecurrentCapture:
    """Copies of every recurrent state the cache holds now (after a forward): the states at the token it ended at."""
    captured = {}
    for index in recurrent_layer_indices(cache):
        layer = cache.layers[index]
        for state in range(layer.number_of_states):
            if layer.is_recurrent_states_initialized[state]:
                captured[(index, state)] = layer.recurrent_states[state].detach().clone()
    return captured


def snapshot_of_row(
    cache: Cache, row: int, length: int, position: int, recurrent: RecurrentCapture | None
) -> StateSnapshot | None:
    """Row `row`'s snapshot at `position`, or `None` when some state at that token is not known.

    Args:
        cache (`Cache`): the call's cache, holding `length` tokens.
        row (`int`): the batch row.
        length (`int`): tokens the cache holds (its recurrent states are those after token `length - 1`).
        position (`int`): the token count the snapshot resumes from (`<= length`).
        recurrent (`RecurrentCapture`, *optional*):
            the recurrent states captured after a forward that ended at `position` (`None` when `position == length`:
            the cache's own states are read).

    Returns:
        `StateSnapshot` or `None`
    """
    states = []
    for index in recurrent_layer_indices(cache):
        layer = cache.layers[index]
        for state in range(layer.number_of_states):
            conv = rec = None
            kernel = layer.conv_kernel_size[state]
            if layer.is_conv_states_initialized[state]:
                conv = _conv_window(layer.conv_states[state][row], kernel, length, position, layer.record_past)
                if conv is None:
                    return None
            if layer.is_recurrent_states_initialized[state]:
                source = layer.recurrent_states[state] if recurrent is None else recurrent.get((index, state))
                if source is None:
                    return None
                rec = source[row].detach().clone()
            states.append((index, state, kernel, conv, rec))
    return StateSnapshot(tuple(states))


def _conv_window(inputs: torch.Tensor, kernel: int, length: int, position: int, recorded: bool) -> torch.Tensor | None:
    # `inputs`: (channels, columns) or (columns,) (Qwen4-exp keeps the token ids its n-grams read as a state), the
    # last column being token `length - 1`'s input. A recording layer keeps every input since its first forward (or
    # since the window it was restored from); otherwise only the last window.
    columns = inputs.shape[-1]
    if not recorded:
        return inputs.detach().clone() if position == length and columns == kernel else None
    first_known = length - columns  # the token of the first column (negative: none before token 0)
    end = columns - (length - position)
    start = end - kernel
    if start < 0 and (first_known > 0 or not inputs.is_floating_point()):
        # The window reaches before the recorded inputs, or before token 0 in a state of token ids, which its model
        # pads with its own token (Qwen4-exp: eos), not zeros: no snapshot there
        return None
    window = inputs[..., max(start, 0) : end]
    if start < 0:  # before token 0: zeros, as transformers pads a short prefill
        window = torch.nn.functional.pad(window, (-start, 0))
    return window.detach().clone()


def restore_snapshot(cache: Cache, snapshot: StateSnapshot, device: torch.device) -> None:
    """Put a snapshot's states into a fresh cache (batch of one) through the cache's own update methods.

    Args:
        cache (`Cache`): a cache no forward has written to.
        snapshot (`StateSnapshot`): the states to resume from.
        device (`torch.device`): where the model runs.
    """
    for index, state, kernel, conv, rec in snapshot.states:
        if conv is not None:
            cache.update_conv_state(conv[None].to(device), index, state_idx=state, conv_kernel_size=kernel)
        if rec is not None:
            cache.update_recurrent_state(rec[None].to(device), index, state_idx=state)
