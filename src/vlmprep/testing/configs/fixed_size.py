"""Tiny configs of the families whose images have one fixed size: Gemma3, PaliGemma, LLaVA, VipLLaVA, Video-LLaVA,
DeepSeek-VL (and its hybrid with a SAM tower) and Aria (square crops)."""

from __future__ import annotations

import transformers

from .parts import (
    TINY_BOI_TOKEN_ID,
    TINY_EOI_TOKEN_ID,
    TINY_IMAGE_TOKEN_ID,
    TINY_VIDEO_TOKEN_ID,
    tiny_sam_vision_config,
    tiny_text_config,
    tiny_vision_config,
)

# DeepSeek-VL-Hybrid's SAM tower reads each image again at twice the SigLIP size.
HIGH_RES_IMAGE_SIZE = 32
# Aria's `projector_patch_to_query_dict` for this tiny tower: a 16 px crop is (16 / 4) ** 2 = 16 patches -> 4 queries.
ARIA_PATCH_TO_QUERY = {16: 4}


def _siglip(**overrides) -> dict:
    return tiny_vision_config("siglip_vision_model", **overrides)


def _llava_parts() -> dict:
    """LLaVA's keyword arguments: a two-layer CLIP tower (16 patches per 16x16 image), a Llama decoder."""
    vision = tiny_vision_config("clip_vision_model", num_hidden_layers=2, projection_dim=32)
    return {"text_config": tiny_text_config(), "vision_config": vision, "image_token_index": TINY_IMAGE_TOKEN_ID}


def _deepseek_parts() -> dict:
    """DeepSeek-VL's keyword arguments: a SigLIP tower (16 patches per 16x16 image), a Llama decoder."""
    return {"text_config": tiny_text_config(), "vision_config": _siglip(), "image_token_id": TINY_IMAGE_TOKEN_ID}


def tiny_gemma3_config(sliding_window: int = 6, mm_tokens_per_image: int = 16) -> transformers.Gemma3Config:
    """A tiny Gemma3 config: one sliding and one full attention layer, `mm_tokens_per_image` tokens per image.

    Args:
        sliding_window (`int`, *optional*, defaults to 6):
            Window of the sliding-attention layer; keep it shorter than prompts so the sliding path is exercised.
        mm_tokens_per_image (`int`, *optional*, defaults to 16):
            Placeholder tokens per image: 16 or 4 (a square dividing the 4x4 patch grid of a 16x16 image); 16
            makes an image span longer than the default sliding window.

    Returns:
        `transformers.Gemma3Config`
    """
    text = tiny_text_config(
        "gemma3_text",
        head_dim=16,
        sliding_window=sliding_window,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=1024,
    )
    return transformers.Gemma3Config(
        text_config=text,
        vision_config=_siglip(num_channels=3),
        mm_tokens_per_image=mm_tokens_per_image,
        boi_token_index=TINY_BOI_TOKEN_ID,
        eoi_token_index=TINY_EOI_TOKEN_ID,
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )


def tiny_paligemma_config() -> transformers.PaliGemmaConfig:
    """A tiny PaliGemma config: 16 placeholder tokens per 16x16 image, Gemma text decoder.

    Returns:
        `transformers.PaliGemmaConfig`
    """
    return transformers.PaliGemmaConfig(
        text_config=tiny_text_config("gemma", head_dim=16),
        vision_config=_siglip(num_channels=3, projection_dim=32),
        image_token_index=TINY_IMAGE_TOKEN_ID,
        projection_dim=32,
    )


def tiny_llava_config() -> transformers.LlavaConfig:
    """A tiny LLaVA config: CLIP vision tower, Llama decoder, 16 placeholder tokens per 16x16 image.

    Returns:
        `transformers.LlavaConfig`
    """
    return transformers.LlavaConfig(**_llava_parts(), vision_feature_layer=-1)


def tiny_vipllava_config() -> transformers.VipLlavaConfig:
    """A tiny VipLLaVA config: LLaVA's tower and decoder, features of the last two vision layers.

    Returns:
        `transformers.VipLlavaConfig`
    """
    return transformers.VipLlavaConfig(**_llava_parts(), vision_feature_layer=[-2, -1])


def tiny_video_llava_config() -> transformers.VideoLlavaConfig:
    """A tiny Video-LLaVA config: LLaVA's tower and decoder, a video placeholder besides the image one.

    Returns:
        `transformers.VideoLlavaConfig`
    """
    return transformers.VideoLlavaConfig(**_llava_parts(), video_token_index=TINY_VIDEO_TOKEN_ID)


def tiny_deepseek_vl_config() -> transformers.DeepseekVLConfig:
    """A tiny DeepSeek-VL config: a SigLIP tower, 16 placeholder tokens per 16x16 image, Llama decoder.

    Returns:
        `transformers.DeepseekVLConfig`
    """
    return transformers.DeepseekVLConfig(**_deepseek_parts())


def tiny_deepseek_vl_hybrid_config() -> transformers.DeepseekVLHybridConfig:
    """A tiny DeepSeek-VL-Hybrid config: DeepSeek-VL's, plus a SAM tower reading each image at 32x32.

    Returns:
        `transformers.DeepseekVLHybridConfig`
    """
    sam = tiny_sam_vision_config("sam_vision_model", output_channels=8, image_size=HIGH_RES_IMAGE_SIZE, patch_size=4)
    return transformers.DeepseekVLHybridConfig(**_deepseek_parts(), high_res_vision_config=sam)


def tiny_aria_config() -> transformers.AriaConfig:
    """A tiny Aria config: an Idefics3 tower, 4 queries per 16x16 crop, a decoder of 2 experts plus a shared one.

    Returns:
        `transformers.AriaConfig`
    """
    return transformers.AriaConfig(
        text_config=tiny_text_config(None, moe_num_experts=2, moe_topk=1, moe_num_shared_experts=1),
        vision_config=tiny_vision_config("idefics3_vision"),
        projector_patch_to_query_dict=dict(ARIA_PATCH_TO_QUERY),
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )
