"""vlmprep: drop-in transformers vision-language models whose vision encoder runs once, in input preparation."""

from .utils._compat import check_transformers_version

check_transformers_version()

from .cache.encoder_cache import EncoderCache, EncoderCacheStats  # noqa: E402
from .cache.prefix_cache import PrefixCache, PrefixCacheStats  # noqa: E402
from .generation import VisionFacts, VisionPrepGenerationMixin  # noqa: E402
from .loading.text_only import AutoModelForCausalLM  # noqa: E402
from .models import (  # noqa: E402
    AutoModelForImageTextToText,
    Gemma3ForConditionalGeneration,
    LlavaForConditionalGeneration,
    PaliGemmaForConditionalGeneration,
)

__version__ = "0.1.0"

__all__ = [
    "AutoModelForCausalLM",
    "AutoModelForImageTextToText",
    "EncoderCache",
    "EncoderCacheStats",
    "Gemma3ForConditionalGeneration",
    "LlavaForConditionalGeneration",
    "PaliGemmaForConditionalGeneration",
    "PrefixCache",
    "PrefixCacheStats",
    "VisionFacts",
    "VisionPrepGenerationMixin",
    "__version__",
]
