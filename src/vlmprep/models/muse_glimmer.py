"""Muse Glimmer: flattened patches on a (t, h, w) grid, 1D text positions, a Gemma2-like decoder with NoPE layers.

Images come as Qwen2-VL's do (`pixel_values` rows of `patch_temporal * 3 * patch_size**2` values, one
`image_grid_thw` row per image), each image one run of `t * h * w / merge_size**2` placeholders between
`<|image_start|>` and `<|image_end|>`. A video's placeholders come as one run per frame after the frame's timestamp.
The decoder's positions are plain 1D; only the vision config's names differ from Qwen2-VL's (`merge_size`,
`patch_temporal`, RGB hard-coded in the patch embedding).
"""

import transformers

from ..generation import VisionPrepGenerationMixin
from .layouts.patch_grid import PatchGridPerFrameTextPositionsLayout, PatchGridVisionNames


class MuseGlimmerForConditionalGeneration(
    PatchGridPerFrameTextPositionsLayout, VisionPrepGenerationMixin, transformers.MuseGlimmerForConditionalGeneration
):
    """Drop-in `transformers.MuseGlimmerForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.muse_glimmer import MuseGlimmerForConditionalGeneration
    >>> text = {"vocab_size": 128, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
    ...         "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "bos_token_id": 1,
    ...         "eos_token_id": 2}
    >>> vision = {"patch_size": 4, "pos_emb_height": 4, "pos_emb_width": 4, "num_attention_heads": 2,
    ...           "num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64, "max_position_embeddings": 16}
    >>> config = transformers.MuseGlimmerConfig(text_config=text, vision_config=vision, out_hidden_size=128,
    ...                                         projector_hidden_size=32, image_token_id=122, video_token_id=123)
    >>> model = MuseGlimmerForConditionalGeneration(config).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    vision_config_names = PatchGridVisionNames(
        merge_size="merge_size", temporal_patch_size="patch_temporal", channels=None
    )
