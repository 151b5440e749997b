"""A tiny random-weight LLaVA checkpoint with its processor, for serving tests and benchmarks of continuous batching.

LLaVA is causal everywhere (no bidirectional image block), so transformers' continuous-batching engine runs its image
requests exactly; the demo's Gemma3 is refused there. The tokenizer and chat template are the demo checkpoint's, with
`<image_soft_token>` as LLaVA's image placeholder.
"""

from __future__ import annotations

import os
from pathlib import Path

from .cli.demo_checkpoint import DEMO_CHAT_TEMPLATE, write_chat_checkpoint

__all__ = ["build_llava_checkpoint"]

# The demo template's image item becomes LLaVA's placeholder, which `LlavaProcessor` expands to one token per feature.
LLAVA_CHAT_TEMPLATE = DEMO_CHAT_TEMPLATE.replace("<start_of_image>", "<image_soft_token>")


def build_llava_checkpoint(directory: str | os.PathLike, seed: int = 0) -> Path:
    """Write a tiny image-sensitive LLaVA checkpoint (model, tokenizer, image processor, processor) to `directory`.

    Args:
        directory (`str` or `os.PathLike`): where to write; created (with parents) when missing.
        seed (`int`, *optional*, defaults to 0): seed of the random weights.

    Returns:
        `Path`: `directory`.
    """
    import transformers

    from .testing import tiny_llava_config

    model_class = transformers.LlavaForConditionalGeneration
    return write_chat_checkpoint(directory, model_class, tiny_llava_config(), _llava_processor, seed)


def _llava_processor(config, tokenizer):
    from transformers import CLIPImageProcessor, LlavaProcessor

    vision = config.vision_config
    size = {"height": vision.image_size, "width": vision.image_size}
    return LlavaProcessor(
        image_processor=CLIPImageProcessor(size=size, crop_size=size, do_center_crop=False),
        tokenizer=tokenizer,
        chat_template=LLAVA_CHAT_TEMPLATE,
        patch_size=vision.patch_size,
        vision_feature_select_strategy=config.vision_feature_select_strategy,
        num_additional_image_tokens=1,  # CLIP's class token, which the "default" strategy drops
        image_token=tokenizer.image_token,
    )
