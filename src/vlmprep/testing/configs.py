"""Tiny random-weight model configs for tests, demos and benchmarks.

Every builder returns a transformers config small enough to run on a CPU in milliseconds (2 decoder layers,
hidden size 32, 16x16 images). Token ids above 100 are reserved for special tokens so that random text ids
(drawn from 3..99) never collide with them.
"""

from __future__ import annotations

from transformers import Gemma3Config, LlavaConfig, PaliGemmaConfig, PreTrainedConfig

# Special token ids shared by every tiny config.
TINY_VOCAB_SIZE = 128
TINY_IMAGE_TOKEN_ID = 122
TINY_BOI_TOKEN_ID = 120
TINY_EOI_TOKEN_ID = 121
TINY_IMAGE_SIZE = 16

_SIGLIP_VISION = {
    "model_type": "siglip_vision_model",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "image_size": TINY_IMAGE_SIZE,
    "patch_size": 4,
    "num_channels": 3,
}


def tiny_gemma3_config(sliding_window: int = 6, mm_tokens_per_image: int = 16) -> Gemma3Config:
    """A tiny Gemma3 config: one sliding and one full attention layer, `mm_tokens_per_image` tokens per image.

    Args:
        sliding_window (`int`, *optional*, defaults to 6):
            Window of the sliding-attention layer; keep it shorter than prompts so the sliding path is exercised.
        mm_tokens_per_image (`int`, *optional*, defaults to 16):
            Placeholder tokens per image: 16 or 4 (a square dividing the 4x4 patch grid of a 16x16 image); 16
            makes an image span longer than the default sliding window.

    Returns:
        `Gemma3Config`
    """
    return Gemma3Config(
        text_config={
            "model_type": "gemma3_text",
            "vocab_size": TINY_VOCAB_SIZE,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "sliding_window": sliding_window,
            "layer_types": ["sliding_attention", "full_attention"],
            "max_position_embeddings": 1024,
        },
        vision_config=dict(_SIGLIP_VISION),
        mm_tokens_per_image=mm_tokens_per_image,
        boi_token_index=TINY_BOI_TOKEN_ID,
        eoi_token_index=TINY_EOI_TOKEN_ID,
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )


def tiny_paligemma_config() -> PaliGemmaConfig:
    """A tiny PaliGemma config: 16 placeholder tokens per 16x16 image, Gemma text decoder.

    Returns:
        `PaliGemmaConfig`
    """
    return PaliGemmaConfig(
        text_config={
            "model_type": "gemma",
            "vocab_size": TINY_VOCAB_SIZE,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
        },
        vision_config={**_SIGLIP_VISION, "projection_dim": 32},
        image_token_index=TINY_IMAGE_TOKEN_ID,
        projection_dim=32,
    )


def tiny_llava_config() -> LlavaConfig:
    """A tiny LLaVA config: CLIP vision tower, Llama decoder, 16 placeholder tokens per 16x16 image.

    Returns:
        `LlavaConfig`
    """
    return LlavaConfig(
        text_config={
            "model_type": "llama",
            "vocab_size": TINY_VOCAB_SIZE,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
        },
        vision_config={
            "model_type": "clip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": TINY_IMAGE_SIZE,
            "patch_size": 4,
            "projection_dim": 32,
        },
        image_token_index=TINY_IMAGE_TOKEN_ID,
        vision_feature_layer=-1,
    )


TINY_CONFIG_BUILDERS = {
    "gemma3": tiny_gemma3_config,
    "paligemma": tiny_paligemma_config,
    "llava": tiny_llava_config,
}


def tiny_config(model_type: str) -> PreTrainedConfig:
    """The tiny config of a model type (`"gemma3"`, `"paligemma"`, `"llava"`, ...).

    Args:
        model_type (`str`): a key of `TINY_CONFIG_BUILDERS`.

    Returns:
        `PreTrainedConfig`
    """
    if model_type not in TINY_CONFIG_BUILDERS:
        raise ValueError(f"No tiny config for model type {model_type!r}; known: {sorted(TINY_CONFIG_BUILDERS)}")
    return TINY_CONFIG_BUILDERS[model_type]()
