"""Cohere Compass: Qwen3-VL's inputs, M-RoPE positions and deepstack features on a Cohere2-like decoder.

Images and videos are Qwen3-VL's (flattened patches with one `(t, h, w)` grid row per item, a video one run per frame
after its timestamp); the decoder's sliding-window layers take interleaved multimodal rope, its full-attention layers
none (NoPE), and its logits are scaled by `logit_scale`.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout


class CohereCompassForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.CohereCompassForConditionalGeneration
):
    """Drop-in `transformers.CohereCompassForConditionalGeneration` whose vision tower runs once, in input
    preparation.

    The vision tower's deepstack features are kept with each item's features and fed to the same placeholders, chunk
    by chunk, as Qwen3-VL's.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.cohere_compass import CohereCompassForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_cohere_compass_config
    >>> model = CohereCompassForConditionalGeneration(tiny_cohere_compass_config()).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, modality="video")
    [[4, 4]]

    ```
    """

    video_runs_per_frame = True
