"""Inkling (`inkling_mm_model`): image patches and audio clips, each encoded once.

The image processor cuts an image into square patches (padded with -1), repeats each in time to the tower's temporal
patch and returns `pixel_values` `(patches, temporal_patch_size, patch_size, patch_size, channels)`, every image's
patches back to back; an image is one run of one placeholder per patch (`InklingProcessor.replace_image_token`). The
tower folds each patch into one vector on its own, so a patch is an item (`patch_items_and_audio`). An audio clip is
`audio_input_ids` `(clips, frames, mel_bins)` of quantized log-mel levels (dMel) with `audio_input_ids_mask` of its
real frames; the audio tower embeds each real frame into one placeholder's features. The decoder is Inkling2's:
1D positions, sliding-window and full attention layers with short convolutions whose states carry from one prefill
chunk to the next in transformers' own cache layers.

Upstream's forward reads encoded images from `mm_encoder_outputs` but embeds audio from `audio_input_ids` on every
call, with no way to take it encoded. So when a forward gets encoded audio rows, the drop-in builds its input
embeddings itself, exactly as upstream's forward does (the ids embedded, then image and audio rows scattered into
their placeholders), and hands upstream `inputs_embeds`: the audio facts' placement.

No text-only rule yet: its checkpoints (and `save_pretrained`, through transformers' conversion mapping) hold the
decoder's MLP and expert weights fused (`w13`, interleaved), which `InklingForCausalLM` does not read back through the
text-only loader's key renames.
"""

from typing import Any

import transformers

from ..generation.facts import AudioPlacement, ModalityFacts, VisionFacts
from ..generation.items import ItemSchema, clip
from ..generation.validation import check_companion_input
from .base import VisionPrepMixin
from .layouts.patch_items_and_audio import PatchItemsAndAudioLayout

# A clip: `(frames, mel_bins)` levels padded at the end of the frames, with a mask of its real frames. Encoded rows are
# placed as `transformers.InklingModel.forward` places them: the ids embedded, then the image and audio rows.
_AUDIO = ModalityFacts(
    "audio",
    "audio_token_id",
    ("audio_input_ids",),
    ("audio_input_ids_mask",),
    items=ItemSchema((clip("audio_input_ids", "audio_input_ids_mask", axis=1),)),
    placement=AudioPlacement(placed=("image", "audio")),
)


class InklingForConditionalGeneration(
    PatchItemsAndAudioLayout, VisionPrepMixin, transformers.InklingForConditionalGeneration
):
    """Drop-in `transformers.InklingForConditionalGeneration` whose vision and audio towers run once, in input
    preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.inkling_mm_model import InklingForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_inkling_mm_model_config
    >>> model = InklingForConditionalGeneration(tiny_inkling_mm_model_config()).eval()
    >>> mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    >>> model.item_token_counts({"audio_input_ids_mask": mask}, modality="audio")  # a placeholder per real frame
    [3, 2]

    ```
    """

    vision_facts = VisionFacts(per_image_keys=(), pixel_layout=None, other_modalities=(_AUDIO,))

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise when patches or audio levels do not fit the towers: `(patches, temporal_patch_size, patch_size,
        patch_size, channels)` pixels, or `(clips, frames, n_mel_bins)` dMel levels with a mask per frame.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): whose inputs to check.
        """
        if modality == "audio":
            levels, mask = model_kwargs.get("audio_input_ids"), model_kwargs.get("audio_input_ids_mask")
            audio_config = self.config.audio_config
            if levels.ndim != 3 or levels.shape[-1] != audio_config.n_mel_bins or levels.is_floating_point():
                raise ValueError(
                    f"`audio_input_ids` has shape {tuple(levels.shape)} ({levels.dtype}), which this model's audio "
                    f"tower does not take: integer dMel levels (num_clips, frames, {audio_config.n_mel_bins} mel "
                    "bins). Process the audio with this model's processor."
                )
            if bool(((levels < 0) | (levels >= audio_config.mel_vocab_size)).any()):
                raise ValueError(
                    f"`audio_input_ids` holds levels outside [0, {audio_config.mel_vocab_size}): this model quantizes "
                    f"each mel bin into {audio_config.mel_vocab_size} levels. Process the audio with its processor."
                )
            expected, entry = tuple(levels.shape[:2]), "one entry per frame"
            check_companion_input(mask, "audio_input_ids_mask", expected, "audio_input_ids", entry, required=False)
            return
        pixels, vision_config = model_kwargs.get("pixel_values"), self.config.vision_config
        size = vision_config.patch_size
        patch = (vision_config.temporal_patch_size, size, size, vision_config.num_channels)
        if pixels.ndim != 5 or tuple(pixels.shape[1:]) != patch:
            raise ValueError(
                f"`pixel_values` has shape {tuple(pixels.shape)} but this model's vision tower takes patches "
                f"(num_patches, {', '.join(map(str, patch))}). Preprocess the images with this model's processor."
            )
