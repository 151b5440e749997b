"""MiniCPM-V 4.7: MiniCPM-V 4.6's tower, mergers and Qwen3.5 hybrid decoder, with multimodal rope ("canvas M-RoPE").

An image is its global view then its slices, each view one run of placeholders and one item
(`layouts/multi_run.py`, `packed_views_mrope`); a video frame likewise. Positions place each image's views on one
canvas (`get_rope_index`, from the prompt, `mm_token_type_ids` and the views' `target_sizes`), computed here from the
whole prompt rather than from `rope_deltas` kept on the model.

Known gap: transformers' `generate` gives the tokens after a prompt that ends inside an image's canvas (on `</image>`)
the last position + 1 on each rope row, while its forward gives text after a canvas its maximum + 1 on every row; the
drop-in decodes as upstream's `generate`, so a cache holding such tokens, continued, is not exact
(`tests/scenarios/test_multi_run.py::test_continuing_after_a_prompt_that_ends_on_an_image_is_exact`, expected to
fail). Prompts ending in text (a chat template's assistant header) are not affected.
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
