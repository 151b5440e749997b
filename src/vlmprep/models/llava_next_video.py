"""LLaVA-NeXT-Video: LLaVA-NeXT's "anyres" images, and videos whose frames are pooled into one placeholder run."""

from dataclasses import replace

import transformers

from ..generation import VisionPrepGenerationMixin
from ..generation.facts import ModalityFacts
from .layouts.anyres import AnyresCropsLayout


class LlavaNextVideoForConditionalGeneration(
    AnyresCropsLayout, VisionPrepGenerationMixin, transformers.LlavaNextVideoForConditionalGeneration
):
    """Drop-in `transformers.LlavaNextVideoForConditionalGeneration` whose vision tower runs once, in input preparation.

    Images as in `vlmprep.models.llava_next`; each video (`pixel_values_videos`, `(num_videos, frames, C, H, W)`) is
    one run of `frames * pooled tokens` placeholders, encoded once by `get_video_features`.

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
    >>> model.item_token_counts({"image_sizes": torch.tensor([[8, 13]])})
    [14]
    >>> model.count_items({"pixel_values_videos": torch.zeros(2, 4, 3, 8, 8)}, modality="video")
    2

    ```
    """

    # Images as any-res crops. Videos are `(num_videos, frames, C, H, W)`, one entry per video and one run each
    # (their features are checked against the run's length); the model flattens each entry of the video
    # `pooler_output` it is given, so the images' list container suits them too.
    vision_facts = replace(
        AnyresCropsLayout.vision_facts,
        other_modalities=(ModalityFacts("video", "video_token_id", ("pixel_values_videos",)),),
    )
