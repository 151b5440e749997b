"""GLM-4.5V (`glm4v_moe`): GLM-4V's vision inputs and M-RoPE positions on a mixture-of-experts decoder."""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PATCH_GRID_SHARED_PLACEHOLDER_FACTS, PatchGridLayout


class Glm4vMoeForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.Glm4vMoeForConditionalGeneration
):
    """Drop-in `transformers.Glm4vMoeForConditionalGeneration` whose vision tower runs once, in input preparation.

    GLM-4V's layout and facts (see `vlmprep.models.glm4v`); only the decoder differs (mixture of experts).

    Example:

    ```python
    >>> from vlmprep.models.glm4v_moe import Glm4vMoeForConditionalGeneration
    >>> [(m.name, m.token_type) for m in Glm4vMoeForConditionalGeneration.vision_facts.modalities]  # mm_token_type_ids
    [('image', 1), ('video', 2)]

    ```
    """

    video_runs_per_frame = True

    vision_facts = PATCH_GRID_SHARED_PLACEHOLDER_FACTS
