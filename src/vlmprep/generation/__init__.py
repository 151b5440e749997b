"""The shared generation mixin and the image-span mechanism it is built on."""

from .facts import VisionFacts
from .mixin import VisionPrepGenerationMixin
from .prepared import PreparedItems
from .spans import (
    Block,
    ItemSpan,
    find_placeholder_spans,
    merge_blocks,
    plan_prefill_chunks,
    resolve_resume_point,
)

__all__ = [
    "Block",
    "ItemSpan",
    "PreparedItems",
    "VisionFacts",
    "VisionPrepGenerationMixin",
    "find_placeholder_spans",
    "merge_blocks",
    "plan_prefill_chunks",
    "resolve_resume_point",
]
