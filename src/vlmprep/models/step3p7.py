"""Step-3.7: a ViT with 2D rope whose two stride-2 convolutions merge 4x4 patches, on a decoder of sliding-window and
full attention layers with mixture-of-experts MLPs (1D positions).

An image is a global view and local crops, encoded from two pixel inputs and joined per image: its placeholders are
one run per crop (`<patch_start>...<patch_end>`, rows ended by `<patch_newline>`), then the global view's run
(`<im_start>...<im_end>`): one item in pieces (`layouts/multi_run.py`, `global_and_local_views`).
"""

import math

import transformers

from .base import VisionPrepMixin
from .layouts.multi_run import GlobalAndLocalViewsLayout


class Step3p7ForConditionalGeneration(
    GlobalAndLocalViewsLayout, VisionPrepMixin, transformers.Step3p7ForConditionalGeneration
):
    """Drop-in `transformers.Step3p7ForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.step3p7 import Step3p7ForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_step3p7_config
    >>> model = Step3p7ForConditionalGeneration(tiny_step3p7_config()).eval()
    >>> views = {"pixel_values": torch.zeros(1, 3, 32, 32), "pixel_values_local": torch.zeros(2, 3, 16, 16)}
    >>> model.item_token_counts({**views, "num_local_patches": torch.tensor([2])})  # two crops, then the global view
    [[1, 1, 4]]

    ```
    """

    def view_token_count(self, height: int, width: int) -> int:
        """Placeholders of a `height x width` view: its patch grid halved (rounded up) by each stride-2 convolution."""
        patch = self.config.vision_config.patch_size
        return math.ceil(height // patch / 4) * math.ceil(width // patch / 4)
