"""Audio clips: log-mel frames padded to the longest clip of a batch, with a mask of the real frames.

A clip's features do not depend on the padding a batch adds (its tower masks it), so a clip is handed to the audio
tower, and hashed, without it: the same clip then hits the encoder and prefix caches alone or batched with a longer
one. Gemma 4 and the Qwen-Omni thinkers read `(num_clips, frames, mel_bins)` features with a `(num_clips, frames)`
mask, under their own input names.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "AudioModalityHooks",
    "check_audio_tower",
    "ids_with_placeholders_as",
    "input_ids_for_encoded_items",
    "inputs_with_encoded_audio",
    "scatter_encoded_rows",
    "select_audio_clips",
]


def select_audio_clips(
    model_kwargs: dict[str, Any], indices: list[int], features_key: str, mask_key: str, frame_axis: int = 1
) -> dict[str, Any]:
    """The features and masks of the given clips, cut to the longest real clip among them (padding at the end).

    Args:
        model_kwargs (`dict[str, Any]`): the call's inputs.
        indices (`list[int]`): indices among the call's clips.
        features_key (`str`): the name of the features, e.g. `(num_clips, frames, mel_bins)`.
        mask_key (`str`): the name of the `(num_clips, frames)` mask of real frames (or samples).
        frame_axis (`int`, *optional*, defaults to `1`): the features' axis of frames (`-1`: `(clips, mel_bins,
            frames)` features, or waveforms).

    Returns:
        `dict[str, Any]`: `{features_key: ..., mask_key: ...}` for those clips, in that order.
    """
    features, mask = model_kwargs[features_key][indices], model_kwargs.get(mask_key)
    if mask is None:
        return {features_key: features}
    mask = mask[indices]
    real = mask.bool()
    # One past each clip's last real frame: padding only follows the real frames (the feature extractors pad at the
    # end), so frames after it are padding in every clip of the selection.
    last = torch.where(real, torch.arange(real.shape[-1], device=real.device) + 1, 0).amax(-1)
    frames = int(last.max()) if last.numel() else 0
    return {features_key: features.narrow(frame_axis, 0, frames), mask_key: mask[:, :frames]}


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
    model,
    args: tuple,
    kwargs: dict[str, Any],
    placed: tuple[str, ...],
    keep_input_ids: bool = False,
    placeholders_embedded_as: int | None = None,
) -> dict[str, Any] | None:
    """The keyword arguments for upstream's forward when `mm_encoder_outputs` holds encoded audio rows, else `None`.

    Upstream's omni forwards encode audio from its raw inputs on every call and have no way to take it encoded, so
    the drop-in builds the input embeddings as upstream's forward does first: the ids embedded (each placeholder as
    `placeholders_embedded_as` where upstream does so), then the rows of the `placed` modalities scattered into their
    placeholders. Upstream then places the other modalities' rows by the ids (`keep_input_ids`), or takes the
    embeddings alone.

    Args:
        model: the drop-in (its audio facts name the raw audio input).
        args (`tuple`): the forward's positional arguments.
        kwargs (`dict[str, Any]`): its keyword arguments.
        placed (`tuple[str, ...]`): the modalities whose encoded rows are scattered here (audio among them).
        keep_input_ids (`bool`, *optional*, defaults to `False`): hand upstream the ids with the embeddings.
        placeholders_embedded_as (`int`, *optional*): the id every placeholder is embedded as (default: itself).

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
    if placeholders_embedded_as is not None:
        embedded_ids = ids_with_placeholders_as(model, input_ids, placeholders_embedded_as)
    inputs_embeds = model.get_input_embeddings()(embedded_ids)
    for modality in placed:
        if encoded.get(modality) is not None:
            mask = input_ids == model.vision_facts.modality(modality).placeholder_id(model.config)
            inputs_embeds = scatter_encoded_rows(inputs_embeds, mask, encoded[modality], modality)
    others = {name: output for name, output in encoded.items() if name not in placed}
    return {
        **kwargs,
        "input_ids": input_ids if keep_input_ids else None,
        "inputs_embeds": inputs_embeds,
        "mm_encoder_outputs": others or None,
    }


class AudioModalityHooks:
    """The item hooks of the audio modality, for a family that adds audio clips to a layout of its images (listed
    before that layout among the family's bases; the layout stays the family's layout).

    Each hook hands `"audio"` to the family's own method (`audio_token_counts`, `select_audio_inputs`,
    `check_audio_inputs`) and every other modality to the layout. A clip is one entry of the first raw audio input.
    """

    def audio_token_counts(self, model_kwargs: dict[str, Any]) -> list[int] | None:
        """Placeholders of each clip (`None`: without the inputs that give them); each family states its tower's.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.

        Returns:
            `list[int]` or `None`
        """
        raise NotImplementedError(f"{type(self).__name__} must say how many placeholders each audio clip fills.")

    def count_audio_clips(self, model_kwargs: dict[str, Any]) -> int | None:
        """How many clips the raw audio input holds (`None`: none passed).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.

        Returns:
            `int` or `None`
        """
        clips = model_kwargs.get(self.vision_facts.modality("audio").pixel_keys[0])
        return None if clips is None else clips.shape[0]

    def select_audio_inputs(self, model_kwargs: dict[str, Any], indices: list[int]) -> dict[str, Any]:
        """The raw audio inputs of the given clips (each family cuts them to what its tower reads).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            indices (`list[int]`): indices among the call's clips.

        Returns:
            `dict[str, Any]`: keyword arguments of `get_audio_features`.
        """
        raise NotImplementedError(f"{type(self).__name__} must say which inputs of a clip its audio tower reads.")

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

    def count_items(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """How many items: clips from `count_audio_clips`, the rest from the layout."""
        if modality == "audio":
            return self.count_audio_clips(model_kwargs)
        return super().count_items(model_kwargs, modality=modality)

    def select_item_inputs(
        self, model_kwargs: dict[str, Any], indices: list[int], modality: str = "image"
    ) -> dict[str, Any]:
        """The inputs of the given items: clips from `select_audio_inputs`, the rest from the layout."""
        if modality == "audio":
            return self.select_audio_inputs(model_kwargs, indices)
        return super().select_item_inputs(model_kwargs, indices, modality=modality)

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Check the inputs of `modality`: audio by `check_audio_inputs`, the rest by the layout."""
        if modality == "audio":
            return self.check_audio_inputs(model_kwargs)
        return super().check_pixel_inputs(model_kwargs, modality=modality)
