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
with the ids (which place the image and video rows): the audio facts' placement.
"""

from dataclasses import replace
from typing import Any

import torch
import transformers

from ..generation.facts import AudioPlacement, ModalityFacts
from ..generation.items import ItemSchema, batched
from ..generation.validation import check_companion_input
from .base import VisionPrepMixin
from .layouts.audio import AudioModalityHooks
from .layouts.patch_grid import PatchGridLayout, PatchGridVisionNames


def _cut_after_last_token(model, model_kwargs: dict[str, Any], clips: dict[str, Any]) -> dict[str, Any]:
    # The tower is causal, so a clip's rows do not depend on samples after them: the clips are cut to the longest real
    # clip among them, rounded up to whole tokens (the last token's padding samples stay), and the same clip hashes
    # alike alone or padded.
    mask = clips.get("input_values_mask")
    if mask is None or clips.get("input_values") is None:
        return clips
    tokens = max(model._audio_tokens(mask.long().sum(-1)), default=0)
    samples = tokens * model._samples_per_token()
    return {"input_values": clips["input_values"][:, :samples], "input_values_mask": mask[:, :samples]}


# A clip: its waveform padded at the end, with a mask of its real samples (without one, every sample is real). Encoded
# rows are placed as upstream's forward places them: every placeholder embedded as id 0, the audio rows scattered in,
# the ids kept for upstream to place the image and video rows.
_AUDIO = ModalityFacts(
    "audio",
    "audio_token_id",
    ("input_values",),
    ("input_values_mask",),
    items=ItemSchema(
        (batched("input_values"), batched("input_values_mask")),
        unpad=_cut_after_last_token,
        counted_by=("input_values",),
    ),
    placement=AudioPlacement(placed=("audio",), keep_input_ids=True, placeholders_embedded_as=0),
)


class MuseSparkForConditionalGeneration(
    AudioModalityHooks,
    PatchGridLayout,
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
    multimodal_positions = False
    video_runs_per_frame = True

    vision_facts = replace(
        PatchGridLayout.vision_facts,
        other_modalities=(*PatchGridLayout.vision_facts.other_modalities, _AUDIO),
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
