"""Qwen2.5-Omni thinker: Qwen2.5-VL's images and videos, and audio clips, each encoded once.

The layout is `patch_grid_audio` (`layouts/patch_grid_audio.py`): images and videos are flattened patches on a
`(t, h, w)` grid; an audio clip is log-mel features with a mask of its real frames, which its tower subsamples about 4x
into one run of audio placeholders. Positions are multimodal rope over the whole prompt, from the model's own
`get_rope_index`. Upstream's forward encodes audio from `input_features` on every call, so the drop-in places encoded
clip rows in the input embeddings itself, as upstream's forward does (the layout's audio placement).
"""

import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid_audio import PatchGridAudioLayout


class Qwen2_5OmniThinkerForConditionalGeneration(
    PatchGridAudioLayout, VisionPrepMixin, transformers.Qwen2_5OmniThinkerForConditionalGeneration
):
    """Drop-in `transformers.Qwen2_5OmniThinkerForConditionalGeneration` whose vision and audio towers run once, in
    input preparation.

    Example:

    ```python
    >>> from vlmprep.models.qwen2_5_omni import Qwen2_5OmniThinkerForConditionalGeneration
    >>> [m.name for m in Qwen2_5OmniThinkerForConditionalGeneration.vision_facts.modalities]
    ['image', 'video', 'audio']

    ```
    """
