"""The shared generation mixin and the image-span mechanism it is built on."""

from .facts import VisionFacts
from .mixin import VisionPrepGenerationMixin
from .prepared import PreparedImages
from .spans import Block, ImageSpan, find_image_spans, merge_blocks, plan_prefill_chunks, resolve_resume_point

__all__ = [
    "Block",
    "ImageSpan",
    "PreparedImages",
    "VisionFacts",
    "VisionPrepGenerationMixin",
    "find_image_spans",
    "merge_blocks",
    "plan_prefill_chunks",
    "resolve_resume_point",
]
