"""LLaVA-NeXT-Video (images): its images are LLaVA-NeXT's "anyres" images; videos are not prepared by vlmprep."""

import transformers

from ..generation import VisionPrepGenerationMixin
from .llava_next import AnyresImages


class LlavaNextVideoForConditionalGeneration(
    AnyresImages, VisionPrepGenerationMixin, transformers.LlavaNextVideoForConditionalGeneration
):
    """Drop-in `transformers.LlavaNextVideoForConditionalGeneration` whose vision tower runs once, in input preparation.

    Images only, as in `vlmprep.models.llava_next`; `pixel_values_videos` are not prepared by vlmprep.

    Example:

    ```python
    >>> import torch, transformers
    >>> from vlmprep.models.llava_next_video import LlavaNextVideoForConditionalGeneration
    >>> config = transformers.LlavaNextVideoConfig(
    ...     text_config={"model_type": "llama", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    ...                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1},
    ...     vision_config={"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
    ...                    "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 8, "patch_size": 4},
    ...     image_grid_pinpoints=[[8, 16], [16, 8]], image_token_index=122, video_token_index=123,
    ... )
    >>> model = LlavaNextVideoForConditionalGeneration(config).eval()
    >>> model.image_token_counts({"image_sizes": torch.tensor([[8, 13]])})
    [14]

    ```
    """
