"""LightOnOCR: Pixtral vision at any image size; an image is one run of `rows * columns` placeholders (no breaks)."""

import transformers

from .base import VisionPrepMixin
from .layouts.pixtral import PixtralImagesLayout


class LightOnOcrForConditionalGeneration(
    PixtralImagesLayout, VisionPrepMixin, transformers.LightOnOcrForConditionalGeneration
):
    """Drop-in `transformers.LightOnOcrForConditionalGeneration` whose vision tower runs once, in input preparation.

    Pixtral images as Mistral3's (see `vlmprep.models.layouts.pixtral`), each one run of placeholders, not one per row.

    Example:

    ```python
    >>> from vlmprep.models.layouts.pixtral import PixtralRowsLayout
    >>> from vlmprep.models.lighton_ocr import LightOnOcrForConditionalGeneration
    >>> issubclass(LightOnOcrForConditionalGeneration, PixtralRowsLayout)  # no `[IMG_BREAK]` between rows
    False

    ```
    """
