"""MiniCPM-o OCR: MiniCPM-V 4.6's model under its own name (a SigLIP tower with a window merger, a 2x2 merger, and
Qwen3.5's hybrid decoder: Gated DeltaNet layers between attention layers, 1D positions), read by default in the "4x"
downsample mode (no window merger: 4x more placeholders per view) and with tied word embeddings.

Images, videos and the decoder's states are as in `minicpmv4_6.py` (layout `packed_views`).
"""

import transformers

from .base import VisionPrepMixin
from .layouts.multi_run import PackedViewsLayout


class MiniCPMOcrForConditionalGeneration(
    PackedViewsLayout, VisionPrepMixin, transformers.MiniCPMOcrForConditionalGeneration
):
    """Drop-in `transformers.MiniCPMOcrForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.minicpm_ocr import MiniCPMOcrForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_minicpm_ocr_config
    >>> model = MiniCPMOcrForConditionalGeneration(tiny_minicpm_ocr_config()).eval()
    >>> sizes = torch.tensor([[8, 8], [4, 8]])  # a global view and one slice, in patches
    >>> model.item_token_counts({"target_sizes": sizes})  # its default "4x" mode: 2x2 patches per placeholder
    [16, 8]

    ```
    """
