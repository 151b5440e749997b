"""Muse Spark: Muse Glimmer's images and videos, and raw-waveform audio clips, each encoded once.

Images and videos are Muse Glimmer's: flattened patches on a `(t, h, w)` grid, an image one run of
`t * h * w / merge_size**2` placeholders, a video one run per temporal patch, 1D positions. An audio clip is its mono
waveform (`input_values`, `(num_clips, samples)`, padded at the end to the longest clip and to a multiple of the
tower's `samples_per_token`, with `input_values_mask` of the real samples); the tower is a causal convolution pyramid,
one audio placeholder per `samples_per_token` samples (the last one partly padding), so a clip's rows do not depend
on the padding a batch adds after it.

Upstream's forward reads encoded images and videos from `mm_encoder_outputs` but encodes audio from `input_values` on
every call. So when a forward gets encoded audio rows, the drop-in embeds the ids as upstream's forward does (every
placeholder as id 0) and scatters the rows into the audio placeholders, then hands upstream those `inputs_embeds`
with the ids (which place the image and video rows).
"""

from dataclasses import replace
from typing import Any

import torch
import transformers

from ..generation.facts import ModalityFacts
from ..generation.validation import check_companion_input
from .base import VisionPrepMixin, keeps_upstream_interface
from .layouts.audio import AudioModalityHooks, inputs_with_encoded_audio
from .layouts.patch_grid import PatchGridPerFrameTextPositionsLayout, PatchGridVisionNames

_AUDIO = ModalityFacts("audio", "audio_token_id", ("input_values",), ("input_values_mask",))


class MuseSparkForConditionalGeneration(
    AudioModalityHooks,
    PatchGridPerFrameTextPositionsLayout,
    VisionPrepMixin,
    transformers.MuseSparkForConditionalGeneration,
):
    """Drop-in `transformers.MuseSparkForConditionalGeneration` whose vision and audio towers run once, in input
    preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.muse_spark import MuseSparkForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_muse_spark_config
    >>> model = MuseSparkForConditionalGeneration(tiny_muse_spark_config()).eval()
    >>> mask = torch.zeros(2, 40, dtype=torch.long)
    >>> mask[0, :40], mask[1, :22] = 1, 1
    >>> model.item_token_counts({"input_values": torch.zeros(2, 40), "input_values_mask": mask}, modality="audio")
    [10, 6]

    ```
    """

    vision_config_names = PatchGridVisionNames(
        merge_size="merge_size", temporal_patch_size="patch_temporal", channels=None
    )
    vision_facts = replace(
        PatchGridPerFrameTextPositionsLayout.vision_facts,
        other_modalities=(*PatchGridPerFrameTextPositionsLayout.vision_facts.other_modalities, _AUDIO),
    )

    def _samples_per_token(self) -> int:
        return self.config.audio_config.samples_per_token

    def _audio_tokens(self, samples: torch.Tensor) -> list[int]:
        # The model's arithmetic: one token per started `samples_per_token` real samples
        per_token = self._samples_per_token()
        return ((samples + per_token - 1) // per_token).tolist()

    def audio_token_counts(self, model_kwargs: dict[str, Any]) -> list[int] | None:
        """Placeholders of each audio clip: its started `samples_per_token` real samples.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.

        Returns:
            `list[int]` or `None` (without the audio inputs)
        """
        values, mask = model_kwargs.get("input_values"), model_kwargs.get("input_values_mask")
        if mask is not None:
            if values is not None:  # counted from the mask: a mask of other samples would miscount
                self.check_audio_inputs(model_kwargs)
            return self._audio_tokens(mask.long().sum(-1))
        # Without a mask upstream reads every sample as real
        return None if values is None else self._audio_tokens(torch.full((values.shape[0],), values.shape[-1]))

    def select_audio_inputs(self, model_kwargs: dict[str, Any], indices: list[int]) -> dict[str, Any]:
        """The given audio clips, cut after their last token's samples.

        The tower is causal, so a clip's rows do not depend on samples after them: the clips are cut to the longest
        real clip among them, rounded up to whole tokens, and the same clip hashes alike alone or padded.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            indices (`list[int]`): indices among the call's clips.

        Returns:
            `dict[str, Any]`: keyword arguments of `get_audio_features`.
        """
        values, mask = model_kwargs["input_values"][indices], model_kwargs.get("input_values_mask")
        if mask is None:
            return {"input_values": values}
        mask = mask[indices]
        tokens = max(self._audio_tokens(mask.long().sum(-1)), default=0)
        samples = tokens * self._samples_per_token()
        return {"input_values": values[:, :samples], "input_values_mask": mask[:, :samples]}

    def check_audio_inputs(self, model_kwargs: dict[str, Any]) -> None:
        """Raise when audio inputs do not fit the audio tower: `(num_clips, samples)` waveforms, whole tokens of
        samples, with a mask per sample.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
        """
        values, mask = model_kwargs.get("input_values"), model_kwargs.get("input_values_mask")
        per_token = self._samples_per_token()
        if values.ndim != 2 or values.shape[-1] % per_token:
            raise ValueError(
                f"`input_values` has shape {tuple(values.shape)}, which this model's audio tower does not take: "
                f"(num_clips, samples) mono waveforms padded to a multiple of {per_token} samples. Extract the audio "
                "with this model's feature extractor."
            )
        entry, source = "one mask entry per sample", "the feature extractor"
        check_companion_input(mask, "input_values_mask", values.shape, "input_values", entry, source, required=False)

    @keeps_upstream_interface(transformers.MuseSparkForConditionalGeneration.forward)
    def forward(self, *args, **kwargs):
        """Upstream's forward; when `mm_encoder_outputs` holds audio rows, they are placed in the embeddings here.

        Args:
            args, kwargs: what `transformers.MuseSparkForConditionalGeneration.forward` takes.

        Returns:
            What upstream's forward returns.
        """
        # As upstream's forward: every placeholder is embedded as id 0, then the items' rows replace it; upstream
        # places the image and video rows by the ids
        placed = inputs_with_encoded_audio(
            self, args, kwargs, placed=("audio",), keep_input_ids=True, placeholders_embedded_as=0
        )
        return super().forward(*args, **kwargs) if placed is None else super().forward(**placed)
