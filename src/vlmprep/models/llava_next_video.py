"""LLaVA-NeXT-Video: LLaVA-NeXT's "anyres" images, and videos whose frames are pooled into one placeholder run."""

from typing import Any

import transformers

from ..generation import VisionFacts, VisionPrepGenerationMixin
from ..generation.facts import ModalityFacts
from .llava_next import AnyresImages


class LlavaNextVideoForConditionalGeneration(
    AnyresImages, VisionPrepGenerationMixin, transformers.LlavaNextVideoForConditionalGeneration
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
    >>> model.image_token_counts({"image_sizes": torch.tensor([[8, 13]])})
    [14]
    >>> model.count_images({"pixel_values_videos": torch.zeros(2, 4, 3, 8, 8)}, modality="video")
    2

    ```
    """

    # Videos are `(num_videos, frames, C, H, W)`, one entry per video; the model flattens each entry of the video
    # `pooler_output` it is given, so the images' list container suits them too.
    vision_facts = VisionFacts(
        fixed_resolution=False,
        pixel_layout="crops",  # images: `(num_images, crops, C, H, W)`, every crop at `image_size`
        features_as_list=True,
        other_modalities=(ModalityFacts("video", "video_token_id", ("pixel_values_videos",)),),
    )

    def image_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> list[int] | None:
        """Images: counted by upstream's packing. Videos: `None`, each video is one run (its features are checked
        against the run's length)."""
        if modality == "image":
            return super().image_token_counts(model_kwargs)
        return VisionPrepGenerationMixin.image_token_counts(self, model_kwargs, modality)

    def select_image_inputs(
        self, model_kwargs: dict[str, Any], indices: list[int], modality: str = "image"
    ) -> dict[str, Any]:
        """Images without their padding crops (as LLaVA-NeXT); videos are one `pixel_values_videos` entry each."""
        if modality == "image":
            return super().select_image_inputs(model_kwargs, indices)
        return VisionPrepGenerationMixin.select_image_inputs(self, model_kwargs, indices, modality)
