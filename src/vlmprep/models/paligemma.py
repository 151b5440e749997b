"""PaliGemma: the whole prefix (image and prompt, `token_type_ids == 0`) attends bidirectionally."""

import transformers

from ..generation import VisionFacts
from .base import VisionPrepMixin
from .layouts.stated_counts import FIXED_IMAGE


class PaliGemmaForConditionalGeneration(VisionPrepMixin, transformers.PaliGemmaForConditionalGeneration):
    """Drop-in `transformers.PaliGemmaForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> from vlmprep import PaliGemmaForConditionalGeneration
    >>> from vlmprep.testing import tiny_paligemma_config
    >>> model = PaliGemmaForConditionalGeneration(tiny_paligemma_config()).eval()

    ```
    """

    layout = FIXED_IMAGE

    vision_facts = VisionFacts(tokens_per_image_attr="text_config.num_image_tokens", bidirectional="prefix")
