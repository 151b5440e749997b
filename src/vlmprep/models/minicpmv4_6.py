"""MiniCPM-V 4.6: a SigLIP tower with a window merger, a 2x2 merger, and Qwen3.5's hybrid decoder (Gated DeltaNet
layers between attention layers, 1D positions).

An image is its global view then its slices, each view one run of placeholders (`layouts/multi_run.py`,
`packed_views`); a video frame likewise. The decoder's recurrent and convolution states live in transformers' own
cache layers, which carry them across prefill chunks and which the prefix cache snapshots (docs/prefix_cache.md).
"""

import transformers

from .base import VisionPrepMixin
from .layouts.multi_run import PackedViewsLayout


class MiniCPMV4_6ForConditionalGeneration(
    PackedViewsLayout, VisionPrepMixin, transformers.MiniCPMV4_6ForConditionalGeneration
):
    """Drop-in `transformers.MiniCPMV4_6ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.minicpmv4_6 import MiniCPMV4_6ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_minicpmv4_6_config
    >>> model = MiniCPMV4_6ForConditionalGeneration(tiny_minicpmv4_6_config()).eval()
    >>> model.item_token_counts({"target_sizes": torch.tensor([[8, 8], [4, 8]])})  # a global view and one slice
    [4, 2]

    ```
    """
