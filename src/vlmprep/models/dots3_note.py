"""Dots 3 Note: Qwen2-VL-style images and videos, and audio chunks, each encoded once.

Images and videos are flattened patches (`channels * patch_size**2` values a row, one frame per patch) on a `(t, h, w)`
grid, one run of `t * h * w / spatial_merge_size**2` placeholders per image or video; positions are 1D. The feature
extractor splits each audio clip into chunks of at most `chunk_length` seconds: `input_features`
`(num_chunks, mel_bins, frames)` padded to the longest chunk, with `chunk_sample_lengths`, the waveform samples of
each. A chunk is encoded alone (bidirectional attention over its real frames) into `ceil(samples / samples_per_token)`
rows; a clip's chunks fill its one run of audio placeholders back to back, so an item of the audio modality is a chunk
(a run holds its clip's chunks in order).

Upstream's forward reads encoded images and videos from `mm_encoder_outputs` but encodes audio from `input_features`
on every call, and takes either the ids or `inputs_embeds`, not both. So when a forward gets encoded audio rows, the
drop-in embeds the ids and scatters every modality's rows into its placeholders itself, as upstream's forward does,
and hands upstream the `inputs_embeds` (the audio facts' placement).

The decoder's indexed attention keeps each query's `index_topk` best keys; continuing a cache with several tokens
past `index_topk` is not exact upstream (see `check_forward_inputs`), so the drop-in refuses it. The prefix
store is not used with indexed layers (their indexer keys are not stored), and continuous batching refuses them.
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


def _cut_after_last_token(model, model_kwargs: dict[str, Any], chunks: dict[str, Any]) -> dict[str, Any]:
    # A chunk's rows do not depend on the frames after its real samples (the tower masks them and attends over its
    # real frames only), so the chunks are cut to the frames of the longest one's tokens: the same chunk hashes alike
    # alone or padded. The feature extractor's cut: `samples_per_token / hop_length` frames a token.
    if chunks.get("input_features") is None or chunks.get("chunk_sample_lengths") is None:
        return chunks
    lengths = torch.as_tensor(chunks["chunk_sample_lengths"])
    per_token = model.config.audio_config.samples_per_token
    tokens = int(((lengths + per_token - 1) // per_token).max()) if lengths.numel() else 0
    frames = tokens * per_token // model.config.audio_config.hop_length
    return {"input_features": chunks["input_features"][..., :frames], "chunk_sample_lengths": lengths}


# An audio chunk: `(mel_bins, frames)` features padded to the call's longest chunk and its waveform's samples. Encoded
# rows are placed as upstream's forward places every modality's: the ids embedded, then each modality's rows.
_AUDIO = ModalityFacts(
    "audio",
    "audio_token_id",
    ("input_features",),
    ("chunk_sample_lengths",),
    items=ItemSchema(
        (batched("input_features"), batched("chunk_sample_lengths")),
        unpad=_cut_after_last_token,
        counted_by=("input_features",),
    ),
    placement=AudioPlacement(placed=("image", "video", "audio")),
)


class Dots3NoteForConditionalGeneration(
    AudioModalityHooks, PatchGridLayout, VisionPrepMixin, transformers.Dots3NoteForConditionalGeneration
):
    """Drop-in `transformers.Dots3NoteForConditionalGeneration` whose vision and audio towers run once, in input
    preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.dots3_note import Dots3NoteForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_dots3_note_config
    >>> model = Dots3NoteForConditionalGeneration(tiny_dots3_note_config()).eval()
    >>> model.item_token_counts({"chunk_sample_lengths": torch.tensor([320, 100])}, modality="audio")  # 32 a token
    [10, 4]

    ```
    """

    vision_config_names = PatchGridVisionNames(temporal_patch_size=None, channels="num_channels")
    multimodal_positions = False

    vision_facts = replace(
        PatchGridLayout.vision_facts,
        other_modalities=(*PatchGridLayout.vision_facts.other_modalities, _AUDIO),
    )

    def _samples_per_token(self) -> int:
        return self.config.audio_config.samples_per_token

    def audio_token_counts(self, model_kwargs: dict[str, Any]) -> list[int] | None:
        """Placeholders of each audio chunk: its started `samples_per_token` samples.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.

        Returns:
            `list[int]` or `None` (without `chunk_sample_lengths`)
        """
        lengths = model_kwargs.get("chunk_sample_lengths")
        if lengths is None:
            return None
        if model_kwargs.get("input_features") is not None:  # counted from the lengths: check they fit the features
            self.check_audio_inputs(model_kwargs)
        per_token = self._samples_per_token()
        return ((torch.as_tensor(lengths) + per_token - 1) // per_token).tolist()

    def check_audio_inputs(self, model_kwargs: dict[str, Any]) -> None:
        """Raise when audio inputs do not fit the audio tower: `(num_chunks, mel_bins, frames)` log-mel features
        holding every chunk's frames, with one `chunk_sample_lengths` entry per chunk.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
        """
        features, lengths = model_kwargs.get("input_features"), model_kwargs.get("chunk_sample_lengths")
        audio_config = self.config.audio_config
        bins = audio_config.feature_size
        if features.ndim != 3 or features.shape[1] != bins:
            raise ValueError(
                f"`input_features` has shape {tuple(features.shape)}, which this model's audio tower does not take: "
                f"(num_chunks, {bins} mel bins, frames). Extract the features with this model's feature extractor."
            )
        lengths = None if lengths is None else torch.as_tensor(lengths)
        check_companion_input(
            lengths,
            "chunk_sample_lengths",
            (features.shape[0],),
            "input_features",
            "one entry per chunk",
            "the feature extractor",
        )
        per_token = self._samples_per_token()
        tokens = int((torch.as_tensor(lengths).max() + per_token - 1) // per_token)
        if tokens * per_token // audio_config.hop_length > features.shape[-1]:
            raise ValueError(
                f"`input_features` has {features.shape[-1]} frames but `chunk_sample_lengths` needs "
                f"{tokens * per_token // audio_config.hop_length} for its longest chunk. Pass the features and "
                "lengths the feature extractor returned together."
            )

    def check_forward_inputs(self, args: tuple, kwargs: dict[str, Any]) -> None:
        """Raise when a forward continues a cache with several tokens past `index_topk`, which upstream's indexed
        attention does not compute as one forward of the whole sequence.

        Args:
            args (`tuple`): the forward's positional arguments.
            kwargs (`dict[str, Any]`): its keyword arguments.
        """
        # Upstream's indexed attention keeps each query's `index_topk` best keys. A forward of several tokens after
        # a cache, once the sequence holds more than `index_topk` tokens, selects other keys than one forward of the
        # whole sequence does (measured on tiny models: logits off by ~1e-3; upstream's own chunked prefill too),
        # while one token at a time (decoding) and anything within `index_topk` tokens is exact.
        text_config = self.config.get_text_config()
        if "indexed_attention" not in text_config.layer_types:
            return
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        past = cache.get_seq_length() if cache is not None else 0
        tokens = args[0] if args else kwargs.get("input_ids")
        tokens = kwargs.get("inputs_embeds") if tokens is None else tokens
        new = 0 if tokens is None else tokens.shape[1]
        if past > 0 and new > 1 and past + new > text_config.index_topk:
            raise ValueError(
                f"This forward continues a cache of {past} tokens with {new} more, past this model's `index_topk` "
                f"({text_config.index_topk}): Dots 3 Note's indexed attention then selects other keys than one "
                "forward of the whole prompt does, so a chunked or cached prefill would not be exact. Prefill the "
                "prompt in one forward (no `prefill_chunk_size`, no cache of a shorter prefix), or keep prompts "
                "within `index_topk` tokens."
            )
