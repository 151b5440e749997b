"""Audio clips: their item schema, their checks, and the forward that places encoded clip rows.

A clip's features do not depend on the padding a batch adds (its tower masks it), so a family states its clips as
`clip(features, mask, axis)` items (`vlmprep.generation.items`): a clip is handed to the audio tower, and hashed,
without that padding, and the same clip hits the encoder and prefix caches alone or batched with a longer one. Gemma 4
and the Qwen-Omni thinkers read `(num_clips, frames, mel_bins)` features with a `(num_clips, frames)` mask, under their
own input names.

Upstream's omni forwards take encoded images and videos but encode audio from its raw inputs on every call. A family
states how a forward handed encoded clip rows builds the input embeddings instead (`AudioPlacement`, on its audio
facts), and `EncodedAudioForward` gives it upstream's forward, with upstream's signature, doing so.
"""

from __future__ import annotations

from typing import Any

import torch

from ...generation.facts import AudioPlacement
from ..base import keeps_upstream_interface

__all__ = [
    "AudioModalityHooks",
    "EncodedAudioForward",
    "check_audio_tower",
    "ids_with_placeholders_as",
    "input_ids_for_encoded_items",
    "inputs_with_encoded_audio",
    "scatter_encoded_rows",
]


def check_audio_tower(tower, family: str) -> None:
    """Raise a clear `ValueError` when a prompt has audio but the checkpoint has no audio tower.

    Args:
        tower: the model's audio tower (`None` without `audio_config`).
        family (`str`): the family's name, for the message.
    """
    if tower is None:
        raise ValueError(
            "The prompt has audio but this checkpoint has no audio tower (`audio_config` is None): remove the audio "
            f"from the prompt, or load a {family} checkpoint with audio."
        )


def input_ids_for_encoded_items(args: tuple, kwargs: dict[str, Any]) -> torch.Tensor:
    """The `input_ids` of a forward given encoded audio, which a family places by those ids itself.

    Upstream's forwards take audio only as raw features; a drop-in handed encoded clip rows builds the input embeddings
    from the ids, so it needs them, by name, and no `inputs_embeds`.

    Args:
        args (`tuple`): the forward's positional arguments.
        kwargs (`dict[str, Any]`): its keyword arguments.

    Returns:
        `torch.Tensor`: the ids.
    """
    input_ids = args[0] if args else kwargs.get("input_ids")
    if input_ids is None or len(args) > 1 or kwargs.get("inputs_embeds") is not None:
        raise ValueError(
            "Encoded audio (`mm_encoder_outputs['audio']`) is placed by `input_ids`, passed by name: pass "
            "`input_ids` (not `inputs_embeds`) and every other input as a keyword."
        )
    return input_ids


def scatter_encoded_rows(inputs_embeds: torch.Tensor, mask: torch.Tensor, output, modality: str) -> torch.Tensor:
    """`inputs_embeds` with the encoded rows of `output` (its `pooler_output`, per item or joined) at `mask`.

    Args:
        inputs_embeds (`torch.Tensor`): `(batch, tokens, hidden)` embeddings of the ids.
        mask (`torch.Tensor`): `(batch, tokens)`, True at the modality's placeholders.
        output: the modality's encoder output, as `mm_encoder_outputs` holds it.
        modality (`str`): its name, for the error.

    Returns:
        `torch.Tensor`: the embeddings with the rows in placeholder order.
    """
    rows = output.pooler_output
    rows = torch.cat(list(rows)) if isinstance(rows, (list, tuple)) else rows.reshape(-1, rows.shape[-1])
    if int(mask.sum()) != rows.shape[0]:
        raise ValueError(
            f"The prompt has {int(mask.sum())} {modality} placeholder tokens but {rows.shape[0]} encoded {modality} "
            f"rows were given. Pass the rows of every {modality} placeholder of `input_ids`."
        )
    mask = mask.unsqueeze(-1).expand_as(inputs_embeds)
    return inputs_embeds.masked_scatter(mask, rows.to(inputs_embeds.device, inputs_embeds.dtype))


def ids_with_placeholders_as(model, input_ids: torch.Tensor, token_id: int) -> torch.Tensor:
    """`input_ids` with the placeholders of every modality of `model` replaced by `token_id`.

    Some upstream forwards embed each placeholder as another token (padding, id 0) before the items' rows replace it.

    Args:
        model: a drop-in (its `vision_facts` and config give the placeholder ids).
        input_ids (`torch.Tensor`): the ids.
        token_id (`int`): the id each placeholder is embedded as.

    Returns:
        `torch.Tensor`: the ids with the placeholders replaced.
    """
    placeholders = torch.zeros_like(input_ids, dtype=torch.bool)
    for modality in model.vision_facts.modalities:
        placeholders |= input_ids == modality.placeholder_id(model.config)
    return input_ids.masked_fill(placeholders, token_id)


def inputs_with_encoded_audio(
    model, args: tuple, kwargs: dict[str, Any], placement: AudioPlacement
) -> dict[str, Any] | None:
    """The keyword arguments for upstream's forward when `mm_encoder_outputs` holds encoded audio rows, else `None`.

    Upstream's omni forwards encode audio from its raw inputs on every call and have no way to take it encoded, so
    the drop-in builds the input embeddings as upstream's forward does first (`placement`): the ids embedded (each
    placeholder as `placeholders_embedded_as` where upstream does so), then the rows of the `placed` modalities
    scattered into their placeholders. Upstream then places the other modalities' rows by the ids (`keep_input_ids`),
    or takes the embeddings alone.

    Args:
        model: the drop-in (its audio facts name the raw audio input).
        args (`tuple`): the forward's positional arguments.
        kwargs (`dict[str, Any]`): its keyword arguments.
        placement (`AudioPlacement`): how the family's upstream forward builds its input embeddings.

    Returns:
        `dict[str, Any]` or `None`: the keyword arguments (`None` without encoded audio: call upstream as it is).
    """
    encoded = kwargs.get("mm_encoder_outputs") or {}
    if encoded.get("audio") is None:
        return None
    input_ids = input_ids_for_encoded_items(args, kwargs)
    raw_key = model.vision_facts.modality("audio").pixel_keys[0]
    if kwargs.get(raw_key) is not None:
        raise ValueError(f"Pass either `{raw_key}` or encoded audio in `mm_encoder_outputs`, not both.")
    embedded_ids = input_ids
    embedded_as = placement.embedded_as(model.config)
    if embedded_as is not None:
        embedded_ids = ids_with_placeholders_as(model, input_ids, embedded_as)
    inputs_embeds = model.get_input_embeddings()(embedded_ids)
    for modality in placement.placed:
        if encoded.get(modality) is not None:
            mask = input_ids == model.vision_facts.modality(modality).placeholder_id(model.config)
            inputs_embeds = scatter_encoded_rows(inputs_embeds, mask, encoded[modality], modality)
    others = {name: output for name, output in encoded.items() if name not in placement.placed}
    placed = {
        **kwargs,
        "input_ids": input_ids if placement.keep_input_ids else None,
        "inputs_embeds": inputs_embeds,
        "mm_encoder_outputs": others or None,
    }
    if placement.per_layer_inputs and getattr(model.config.get_text_config(), "hidden_size_per_layer_input", None):
        # Gemma 4's per-layer inputs come from the ids as embedded, which upstream computes only given the ids
        placed["per_layer_inputs"] = model.model.language_model.get_per_layer_inputs(embedded_ids, None)
    return placed


def _upstream_class(cls: type) -> type | None:
    # The transformers class whose forward a drop-in keeps: the first in its MRO that defines one
    return next(
        (base for base in cls.__mro__[1:] if base.__module__.startswith("transformers.") and "forward" in vars(base)),
        None,
    )


class EncodedAudioForward:
    """Upstream's forward taking encoded audio rows, for a family whose audio facts state an `AudioPlacement` (listed
    before the family's layout, or a base of it).

    Every drop-in class below it gets a `forward` with its upstream class's signature and annotations (`generate`
    validates its kwargs against them): without encoded audio in `mm_encoder_outputs` it is upstream's forward;
    with it, the input embeddings are built as the audio facts' placement says (`inputs_with_encoded_audio`) and
    handed to upstream's forward. A family checks what its forward cannot take in `check_forward_inputs`.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        upstream = _upstream_class(cls)
        if upstream is None or "forward" in vars(cls):  # a layout, or a class with a forward of its own
            return
        facts = cls.vision_facts.modality("audio")
        if facts.placement is None:
            raise TypeError(f"{cls.__name__}'s audio facts state no `placement`, which `EncodedAudioForward` reads.")

        @keeps_upstream_interface(upstream.forward)
        def forward(self, *args, **kwargs):
            return self.forward_with_encoded_audio(args, kwargs)

        forward.__doc__ = (
            f"`transformers.{upstream.__name__}.forward`; when `mm_encoder_outputs` holds audio rows, the input "
            "embeddings are built first (`vlmprep.models.layouts.audio.EncodedAudioForward`)."
        )
        forward.__qualname__ = f"{cls.__qualname__}.forward"
        cls.forward = forward

    def check_forward_inputs(self, args: tuple, kwargs: dict[str, Any]) -> None:
        """Raise a clear `ValueError` for a forward's inputs the drop-in does not take (by default none).

        Args:
            args (`tuple`): the forward's positional arguments.
            kwargs (`dict[str, Any]`): its keyword arguments.
        """

    def forward_with_encoded_audio(self, args: tuple, kwargs: dict[str, Any]):
        """Upstream's forward of these arguments, encoded audio rows placed in the input embeddings first.

        Args:
            args (`tuple`): the forward's positional arguments.
            kwargs (`dict[str, Any]`): its keyword arguments.

        Returns:
            What upstream's forward returns.
        """
        self.check_forward_inputs(args, kwargs)
        placed = inputs_with_encoded_audio(self, args, kwargs, self.vision_facts.modality("audio").placement)
        upstream_forward = super().forward
        return upstream_forward(*args, **kwargs) if placed is None else upstream_forward(**placed)


class AudioModalityHooks(EncodedAudioForward):
    """The item hooks of the audio modality, for a family that adds audio clips to a layout of its images (listed
    before that layout among the family's bases; the layout stays the family's layout), with the forward that places
    encoded clip rows.

    Each hook hands `"audio"` to the family's own method (`audio_token_counts`, `check_audio_inputs`) and every other
    modality to the layout; the clips' inputs are the audio facts' item schema (`ModalityFacts.items`).
    """

    def audio_token_counts(self, model_kwargs: dict[str, Any]) -> list[int] | None:
        """Placeholders of each clip (`None`: without the inputs that give them); each family states its tower's.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.

        Returns:
            `list[int]` or `None`
        """
        raise NotImplementedError(f"{type(self).__name__} must say how many placeholders each audio clip fills.")

    def check_audio_inputs(self, model_kwargs: dict[str, Any]) -> None:
        """Raise a clear `ValueError` when the audio inputs do not fit the audio tower (a family states its shapes).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
        """

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | list | None:
        """Placeholders of each item: a clip's from `audio_token_counts`, the rest from the layout."""
        if modality == "audio":
            return self.audio_token_counts(model_kwargs)
        return super().item_token_counts(model_kwargs, modality=modality)

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Check the inputs of `modality`: audio by `check_audio_inputs`, the rest by the layout."""
        if modality == "audio":
            return self.check_audio_inputs(model_kwargs)
        return super().check_pixel_inputs(model_kwargs, modality=modality)
