"""MiniCPM-V 4.7: MiniCPM-V 4.6's tower, mergers and Qwen3.5 hybrid decoder, with multimodal rope ("canvas M-RoPE").

An image is its global view then its slices, each view one run of placeholders and one item
(`layouts/multi_run.py`, `packed_views_mrope`); a video frame likewise. Positions place each image's views on one
canvas (`get_rope_index`, from the prompt, `mm_token_type_ids` and the views' `target_sizes`), computed here from the
whole prompt rather than from `rope_deltas` kept on the model.

Decoded tokens are numbered as `get_rope_index` numbers text over the whole sequence (the layout's
`_update_model_kwargs_for_generation`, `generation/decode_positions.py`): after a prompt that ends on `</image>`, a
canvas corner, that is the canvas's largest position + 1 on every row, where transformers' `generate` gives the last
position + 1 on each row (docs/migration.md). Prompts ending in text are numbered alike.
"""

import transformers

from .base import VisionPrepMixin
from .layouts.multi_run import PackedViewsMultimodalRopeLayout


class MiniCPMV4_7ForConditionalGeneration(
    PackedViewsMultimodalRopeLayout, VisionPrepMixin, transformers.MiniCPMV4_7ForConditionalGeneration
):
    """Drop-in `transformers.MiniCPMV4_7ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.minicpmv4_7 import MiniCPMV4_7ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_minicpmv4_7_config
    >>> model = MiniCPMV4_7ForConditionalGeneration(tiny_minicpmv4_7_config()).eval()
    >>> model.item_token_counts({"target_sizes": torch.tensor([[8, 8], [4, 8]])})  # a global view and one slice
    [4, 2]

    ```
    """
