"""Apertus 1.5: images and audio clips become discrete codes of the decoder's vocabulary, each tokenized once.

An image (`pixel_values` `(images, 3, H, W)` padded to the batch's largest, `image_sizes` its real `(height, width)`)
is cropped to its size and turned by the vision tokenizer into a `(height // f, width // f)` grid of codes, `f` the
tokenizer's downsampling; the processor writes it as `<boi>`, the grid size as text, `<image_wrapper>`, then one run of
`width // f` placeholders per grid row, the rows split by `<eol>` tokens, and `<eoi>`. An audio clip (`input_values`,
the mono waveform padded at the end, with `padding_mask` of its real samples) is tokenized at its own length by the
WavTokenizer encoder into `ceil(samples / hop_length)` codes, one run between `<boa>` and `<eoa>`. Each code is
offset into the vocabulary and embedded by the decoder's token table: "encode once" means tokenize once. Positions
are 1D, attention causal.

Upstream's forward reads encoded images from `mm_encoder_outputs` but tokenizes audio from `input_values` on every
call. So when a forward gets encoded audio rows, the drop-in embeds the ids and scatters every item's rows into its
placeholders itself, exactly as upstream's forward does, and hands upstream the `inputs_embeds` (which upstream takes
without the ids): the audio facts' placement.
"""

from typing import Any

import torch
import transformers

from ..generation import VisionFacts
from ..generation.facts import AudioPlacement, ModalityFacts
from ..generation.items import ItemSchema, clip, default_schema
from ..generation.validation import check_companion_input
from .base import VisionPrepMixin
from .layouts.audio import EncodedAudioForward
from .layouts.code_rows import CODE_ROWS_AND_AUDIO


def _cropped_to_size(model, model_kwargs: dict[str, Any], images: dict[str, Any]) -> dict[str, Any]:
    # Upstream tokenizes each image alone at its own size, so the padding of its batch never changes its codes: the
    # images are cropped to their size (and padded to the largest among them), and an image hashes alike in any batch.
    pixels, sizes = images.get("pixel_values"), images.get("image_sizes")
    if pixels is None or sizes is None:
        return images
    height, width = (int(side) for side in sizes.amax(0).tolist()) if len(sizes) else (0, 0)
    cropped = torch.zeros(*pixels.shape[:2], height, width, dtype=pixels.dtype, device=pixels.device)
    for row, (image_height, image_width) in enumerate(sizes.tolist()):
        cropped[row, :, :image_height, :image_width] = pixels[row, :, :image_height, :image_width]
    return {"pixel_values": cropped, "image_sizes": sizes}


# A clip: its mono waveform padded at the end, with a mask of its real samples; its codes are one tensor of a tuple,
# as each image's. Encoded rows are placed as upstream's forward places them: the ids embedded, then the image and
# audio rows, the embeddings alone handed on.
_AUDIO = ModalityFacts(
    "audio",
    "audio_token_id",
    ("input_values",),
    ("padding_mask",),
    features_as_list=True,
    items=ItemSchema((clip("input_values", "padding_mask", axis=-1),)),
    placement=AudioPlacement(placed=("image", "audio")),
)


class Apertus1p5ForConditionalGeneration(
    EncodedAudioForward, VisionPrepMixin, transformers.Apertus1p5ForConditionalGeneration
):
    """Drop-in `transformers.Apertus1p5ForConditionalGeneration` whose vision and audio tokenizers run once, in input
    preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.apertus1p5 import Apertus1p5ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_apertus1p5_config
    >>> model = Apertus1p5ForConditionalGeneration(tiny_apertus1p5_config()).eval()
    >>> model.item_token_counts({"image_sizes": torch.tensor([[8, 4]])})  # 4 rows of 2 codes (2x2 px each): 4 runs
    [[2, 2, 2, 2]]

    ```
    """

    layout = CODE_ROWS_AND_AUDIO
    vision_facts = VisionFacts(
        image_items=default_schema(("pixel_values",), ("image_sizes",), unpad=_cropped_to_size),
        pixel_layout=None,
        features_as_list=True,
        other_modalities=(_AUDIO,),
    )

    def _spatial_factor(self) -> int:
        return self.config.vision_config.spatial_scale_factor

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list | None:
        """Placeholders of each item: an image's grid rows of `width // f` codes (one run each), an audio clip's
        `ceil(real samples / hop_length)` codes.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (`image_sizes`, `padding_mask`).
            modality (`str`, *optional*, defaults to `"image"`): `"image"` or `"audio"`.

        Returns:
            `list` (the run lengths of each image, a count per clip), or `None` without the inputs that give them.
        """
        if modality == "audio":
            mask = model_kwargs.get("padding_mask")
            if mask is None:
                return None
            if model_kwargs.get("input_values") is not None:  # counted from the mask: another mask would miscount
                self._check_audio_inputs(model_kwargs)
            hop = self.config.audio_config.hop_length
            return ((mask.long().sum(-1) + hop - 1) // hop).tolist()
        image_sizes = model_kwargs.get("image_sizes")
        if image_sizes is None:
            return None
        factor = self._spatial_factor()
        return [[int(width) // factor] * (int(height) // factor) for height, width in image_sizes.tolist()]

    def check_pixel_inputs(self, model_kwargs: dict[str, Any], modality: str = "image") -> None:
        """Raise a clear `ValueError` when an item's inputs do not fit its tokenizer: images `(images, 3, H, W)` holding
        every image of `image_sizes`, sizes in whole codes; mono clips with a right-padded `padding_mask` per sample.

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): whose inputs to check.
        """
        if modality == "audio":
            self._check_audio_inputs(model_kwargs)
            return
        pixels, sizes = model_kwargs.get("pixel_values"), model_kwargs.get("image_sizes")
        channels = self.config.vision_config.in_channels
        if pixels.ndim != 4 or pixels.shape[1] != channels:
            raise ValueError(
                f"`pixel_values` has shape {tuple(pixels.shape)} but this model's vision tower takes (num_images, "
                f"{channels}, height, width) for its vision tokenizer. Preprocess the images with this model's image "
                "processor."
            )
        if sizes is None or tuple(sizes.shape) != (pixels.shape[0], 2):
            raise ValueError(
                "Apertus 1.5 needs one `image_sizes` row (height, width) per image of `pixel_values`: pass the image "
                "processor's `pixel_values` and `image_sizes` together."
            )
        factor = self._spatial_factor()
        if bool((sizes % factor != 0).any()) or bool((sizes <= 0).any()):
            raise ValueError(
                f"`image_sizes` {sizes.tolist()} are not whole multiples of the vision tokenizer's {factor} px codes, "
                "so the prompt's grid of placeholders cannot match the codes. Resize with this model's processor."
            )
        if int(sizes[:, 0].max()) > pixels.shape[-2] or int(sizes[:, 1].max()) > pixels.shape[-1]:
            raise ValueError(
                f"`pixel_values` are {tuple(pixels.shape[-2:])} pixels, smaller than the largest of `image_sizes`. "
                "Pass the image processor's `pixel_values` and `image_sizes` of one batch together."
            )

    def _check_audio_inputs(self, model_kwargs: dict[str, Any]) -> None:
        values, mask = model_kwargs.get("input_values"), model_kwargs.get("padding_mask")
        if values.ndim not in (2, 3) or (values.ndim == 3 and values.shape[1] != 1):
            raise ValueError(
                f"`input_values` has shape {tuple(values.shape)}, which this model's audio tokenizer does not take: "
                "(num_clips, 1, samples) mono waveforms. Extract the audio with this model's feature extractor."
            )
        expected = (values.shape[0], values.shape[-1])
        check_companion_input(
            mask, "padding_mask", expected, "input_values", "one mask entry per sample", "the feature extractor"
        )
        if bool((mask.long().sum(-1) == 0).any()) or bool((mask.long().diff(dim=-1) > 0).any()):
            raise ValueError(
                "`padding_mask` must mark each clip's real samples first, then its padding (at least one real "
                "sample per clip), as the feature extractor returns it."
            )

    def _encoder_cache_identity(self, part: str = "vision") -> tuple[str, ...]:
        # The features are embeddings of the decoder's own token table, which the vision part (the model without its
        # decoder) leaves out: key the encoder cache on every weight.
        return super()._encoder_cache_identity(part="model")
