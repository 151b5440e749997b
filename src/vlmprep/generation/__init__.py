"""The shared generation mixin and the image-span mechanism it is built on."""

from .facts import VisionFacts
from .mixin import VisionPrepGenerationMixin
from .prepared import PreparedImages, PreparedItems
from .spans import (
    Block,
    ImageSpan,
    ItemSpan,
    find_image_spans,
    merge_blocks,
    plan_prefill_chunks,
    resolve_resume_point,
)

__all__ = [
    "Block",
    "ImageSpan",
    "ItemSpan",
    "PreparedImages",
    "PreparedItems",
    "VisionFacts",
    "VisionPrepGenerationMixin",
    "find_image_spans",
    "merge_blocks",
    "plan_prefill_chunks",
    "resolve_resume_point",
]
