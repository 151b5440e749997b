"""Qwen4-exp: Qwen3.5's inputs (flattened patches, one `image_grid_thw` row per image, per-frame video runs,
multimodal rope) on a hybrid decoder of Gated DeltaNet layers and indexed-attention layers, with per-layer n-gram
embeddings.

Every running state lives in transformers' own cache layers, which carry it from one prefill chunk to the next: the
Gated DeltaNet layers' convolution and recurrent states, and, in the layers with n-gram embeddings, the convolution
over them and the last `ngram_size - 1` token ids the n-grams of a chunk's first tokens hash (a state of token ids).
So a chunk, or a prefix-store resume point, gets the tokens before it from the cache: the prefix store's snapshots
hold that id window like any convolution window (`vlmprep.cache.recurrent_state`), and the indexed layers' indexer
keys and their positions per token (`vlmprep.cache.layer_extras`).
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout


class Qwen4ExpForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.Qwen4ExpForConditionalGeneration
):
    """Drop-in `transformers.Qwen4ExpForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.qwen4_exp import Qwen4ExpForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_qwen4_exp_config
    >>> model = Qwen4ExpForConditionalGeneration(tiny_qwen4_exp_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    video_runs_per_frame = True
