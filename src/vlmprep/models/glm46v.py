"""GLM-4.6V (`glm46v`): GLM-4V's vision inputs and M-RoPE positions under its own config type."""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PATCH_GRID_SHARED_PLACEHOLDER_FACTS, PatchGridLayout


class Glm46VForConditionalGeneration(PatchGridLayout, VisionPrepMixin, transformers.Glm46VForConditionalGeneration):
    """Drop-in `transformers.Glm46VForConditionalGeneration` whose vision tower runs once, in input preparation.

    GLM-4V's layout and facts (see `vlmprep.models.glm4v`) under GLM-4.6V's own config type.

    Example:

    ```python
    >>> from vlmprep.models.glm46v import Glm46VForConditionalGeneration
    >>> [m.placeholder_attr for m in Glm46VForConditionalGeneration.vision_facts.modalities]  # frames: image token
    ['image_token_id', 'image_token_id']

    ```
    """

    video_runs_per_frame = True

    vision_facts = PATCH_GRID_SHARED_PLACEHOLDER_FACTS
