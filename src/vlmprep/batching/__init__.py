"""Images in transformers' continuous batching: `generate_batch`, `init_continuous_batching` and paged `generate`."""

from .manager import ImageBatchingManager
from .mixin import ContinuousBatchingMixin
from .prompt import ImagePrompt, RequestImages, build_image_prompt
from .requests import ImageRequestState
from .support import check_batching_support

__all__ = [
    "ContinuousBatchingMixin",
    "ImageBatchingManager",
    "ImagePrompt",
    "ImageRequestState",
    "RequestImages",
    "build_image_prompt",
    "check_batching_support",
]
