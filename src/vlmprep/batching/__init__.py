"""Images in transformers' continuous batching: `generate_batch`, `init_continuous_batching` and paged `generate`."""

from .manager import ItemBatchingManager
from .mixin import ContinuousBatchingMixin
from .prompt import ItemPrompt, RequestItems, build_item_prompt
from .requests import ItemRequestState
from .support import check_batching_support

__all__ = [
    "ContinuousBatchingMixin",
    "ItemBatchingManager",
    "ItemPrompt",
    "ItemRequestState",
    "RequestItems",
    "build_item_prompt",
    "check_batching_support",
]
