"""Drop-in model classes, one thin file per family; `DROP_IN_CLASSES` maps model types to them."""

from .auto import DROP_IN_CLASSES, AutoModelForImageTextToText
from .gemma3 import Gemma3ForConditionalGeneration
from .llava import LlavaForConditionalGeneration
from .paligemma import PaliGemmaForConditionalGeneration

__all__ = [
    "DROP_IN_CLASSES",
    "AutoModelForImageTextToText",
    "Gemma3ForConditionalGeneration",
    "LlavaForConditionalGeneration",
    "PaliGemmaForConditionalGeneration",
]
