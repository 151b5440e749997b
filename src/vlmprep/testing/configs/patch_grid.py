"""Tiny configs of the patch-grid families: flattened patches with one `(t, h, w)` grid row per image or video.

Qwen2-VL, Qwen2.5-VL, Qwen3-VL(-MoE), Cosmos3 Omni (Qwen3-VL's parts), Qwen3.5(-MoE), GLM-4V, GLM-4.5V, GLM-4.6V
(multimodal rope), GLM-5-Next, EXAONE 4.5, HyperCLOVAX-Vision v2, LFM3-VL and Inkling2 (1D positions; Muse Glimmer's,
in `muse`, too). Every tower reads 4 px patches, 2 frames per temporal patch, and merges 2x2 patches into one token, so
an image of `(t, h, w)` patches has `t * h * w / 4` placeholders (Inkling2's grid counts the merged squares:
`t * h * w` placeholders).
"""

from __future__ import annotations

from typing import Any

import transformers

from .parts import (
    TINY_IMAGE_TOKEN_ID,
    TINY_TEXT_SPECIAL_IDS,
    TINY_VIDEO_TOKEN_ID,
    tiny_text_config,
    tiny_vision_config,
)

PATCH_SIZE = 4
TEMPORAL_PATCH_SIZE = 2
MERGE_SIZE = 2
# Vision start and end tokens around a run (Qwen-VL, LFM3-VL); GLM-4V's image and video start and end tokens.
VISION_START, VISION_END = 110, 111
GLM_IMAGE_START, GLM_IMAGE_END, GLM_VIDEO_START, GLM_VIDEO_END = 112, 113, 114, 115
# ERNIE 4.5 VL's video start and end tokens (its images take the vision start and end tokens).
ERNIE_VIDEO_START, ERNIE_VIDEO_END = 112, 113

_PLACEHOLDER_TOKENS = {"image_token_id": TINY_IMAGE_TOKEN_ID, "video_token_id": TINY_VIDEO_TOKEN_ID}
QWEN_SPECIAL_TOKENS = {
    **_PLACEHOLDER_TOKENS,
    "vision_start_token_id": VISION_START,
    "vision_end_token_id": VISION_END,
}
# GLM's `video_token_id` is never in prompts: its video frames use the image placeholder.
GLM_SPECIAL_TOKENS = {
    **_PLACEHOLDER_TOKENS,
    "image_start_token_id": GLM_IMAGE_START,
    "image_end_token_id": GLM_IMAGE_END,
    "video_start_token_id": GLM_VIDEO_START,
    "video_end_token_id": GLM_VIDEO_END,
}


def tiny_patch_merger_vision_config(depth: int = 1, **overrides: Any) -> dict[str, Any]:
    """A tiny Qwen2-VL-like tower: `depth` layers of hidden size 32, 4 px patches, 2 frames per temporal patch, 2x2
    patches merged into one token.

    Args:
        depth (`int`, *optional*, defaults to 1): vision layers.
        overrides (`Any`): further entries (`window_size=16`, `deepstack_visual_indexes=[0]`, ...).

    Returns:
        `dict[str, Any]`: a `vision_config`.
    """
    config = {"depth": depth, "hidden_size": 32, "num_heads": 2, "in_channels": 3, "patch_size": PATCH_SIZE}
    return {**config, "spatial_merge_size": MERGE_SIZE, "temporal_patch_size": TEMPORAL_PATCH_SIZE, **overrides}


def two_layer_tower(**overrides: Any) -> dict[str, Any]:
    return tiny_patch_merger_vision_config(depth=2, intermediate_size=64, out_hidden_size=32, **overrides)


def _windowed_tower(**overrides: Any) -> dict[str, Any]:
    """Qwen2.5-VL's two vision layers: one windowed (a 16 px window: one 2x2 merge window of patches), one full."""
    return two_layer_tower(window_size=16, fullatt_block_indexes=[1], **overrides)


def mrope_text(**overrides: Any) -> dict[str, Any]:
    # `head_dim` is stated, though Qwen2-VL derives it (hidden_size // heads): the bad-cache cases read it. Its 8
    # rotary frequencies are split over the (t, h, w) position rows.
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
    text = tiny_text_config(None, head_dim=16, max_position_embeddings=1024, rope_parameters=rope)
    return {**text, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, **overrides}


def tiny_qwen2_vl_config() -> transformers.Qwen2VLConfig:
    """A tiny Qwen2-VL config: a one-layer tower, a decoder with multimodal rope.

    Returns:
        `transformers.Qwen2VLConfig`
    """
    vision = tiny_patch_merger_vision_config(embed_dim=32, mlp_ratio=2)
    return transformers.Qwen2VLConfig(text_config=mrope_text(), vision_config=vision, **QWEN_SPECIAL_TOKENS)


def tiny_qwen2_5_vl_config() -> transformers.Qwen2_5_VLConfig:
    """A tiny Qwen2.5-VL config: two vision layers, one windowed, one full attention; multimodal rope.

    Returns:
        `transformers.Qwen2_5_VLConfig`
    """
    vision = _windowed_tower(tokens_per_second=2)
    return transformers.Qwen2_5_VLConfig(text_config=mrope_text(), vision_config=vision, **QWEN_SPECIAL_TOKENS)


def tiny_qwen3_vl_config() -> transformers.Qwen3VLConfig:
    """A tiny Qwen3-VL config: the output of vision layer 0 is added to text layer 0 at the placeholders (deepstack);
    interleaved multimodal rope.

    Returns:
        `transformers.Qwen3VLConfig`
    """
    vision = two_layer_tower(num_position_embeddings=16, deepstack_visual_indexes=[0])
    text = {key: value for key, value in mrope_text().items() if key != "pad_token_id"}
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_interleaved": True}
    config = transformers.Qwen3VLConfig(text_config=text, vision_config=vision, **QWEN_SPECIAL_TOKENS)
    config.text_config.pad_token_id = 0
    return config


def tiny_qwen3_vl_moe_config() -> transformers.Qwen3VLMoeConfig:
    """A tiny Qwen3-VL-MoE config: Qwen3-VL's tower on a decoder whose every layer routes to 2 of 4 experts.

    Returns:
        `transformers.Qwen3VLMoeConfig`
    """
    qwen3 = tiny_qwen3_vl_config()
    text = {key: value for key, value in mrope_text().items() if key != "intermediate_size"}
    text["rope_parameters"] = qwen3.text_config.rope_parameters
    text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    return transformers.Qwen3VLMoeConfig(
        text_config=text, vision_config=qwen3.vision_config.to_dict(), **QWEN_SPECIAL_TOKENS
    )


def tiny_cosmos3_omni_config() -> transformers.Cosmos3OmniConfig:
    """A tiny Cosmos3 Omni config: Qwen3-VL's tiny tower (the output of vision layer 0 added to text layer 0 at the
    placeholders) and decoder (interleaved multimodal rope).

    Returns:
        `transformers.Cosmos3OmniConfig`
    """
    qwen3 = tiny_qwen3_vl_config()
    return transformers.Cosmos3OmniConfig(
        text_config=qwen3.text_config.to_dict(), vision_config=qwen3.vision_config.to_dict(), **QWEN_SPECIAL_TOKENS
    )


def tiny_cohere_compass_config() -> transformers.CohereCompassConfig:
    """A tiny Cohere Compass config: Qwen3-VL's tower (deepstack from vision layer 0); a decoder of one sliding-window
    layer (a window of 6 tokens, interleaved multimodal rope) and one full-attention layer without rope (NoPE), its
    logits scaled.

    Returns:
        `transformers.CohereCompassConfig`
    """
    rope = {**tiny_qwen3_vl_config().text_config.rope_parameters, "rope_type": "default", "rope_theta": 10000.0}
    text = tiny_text_config(
        None,
        head_dim=16,
        sliding_window=6,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": rope, "full_attention": None},
        max_position_embeddings=1024,
        logit_scale=0.5,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
    )
    vision = two_layer_tower(num_position_embeddings=16, deepstack_visual_indexes=[0])
    return transformers.CohereCompassConfig(text_config=text, vision_config=vision, **QWEN_SPECIAL_TOKENS)


def glm_tower() -> dict[str, Any]:
    return two_layer_tower(image_size=16)


def tiny_glm4v_config() -> transformers.Glm4vConfig:
    """A tiny GLM-4V config: Qwen2-VL-like tower of 16 px images, a decoder with multimodal rope.

    Returns:
        `transformers.Glm4vConfig`
    """
    return transformers.Glm4vConfig(text_config=mrope_text(), vision_config=glm_tower(), **GLM_SPECIAL_TOKENS)


def tiny_glm4v_moe_config() -> transformers.Glm4vMoeConfig:
    """A tiny GLM-4.5V config: GLM-4V's tower; layer 0 dense, layer 1 routes to 2 of 4 experts plus a shared one.

    Half the head dim is rotary (`partial_rotary_factor` 0.5): 4 frequencies, split over the (t, h, w) position rows.

    Returns:
        `transformers.Glm4vMoeConfig`
    """
    text = mrope_text(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, first_k_dense_replace=1)
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_section": [1, 1, 2], "partial_rotary_factor": 0.5}
    return transformers.Glm4vMoeConfig(text_config=text, vision_config=glm_tower(), **GLM_SPECIAL_TOKENS)


def tiny_glm46v_config() -> transformers.Glm46VConfig:
    """A tiny GLM-4.6V config: GLM-4V's tower and decoder.

    Returns:
        `transformers.Glm46VConfig`
    """
    return transformers.Glm46VConfig(
        text_config=mrope_text(model_type="glm4v_text"),
        vision_config={**glm_tower(), "model_type": "glm4v_vision"},
        **GLM_SPECIAL_TOKENS,
    )


def tiny_glm_ocr_config() -> transformers.GlmOcrConfig:
    """A tiny GLM-OCR config: GLM-4V's tower (here with q/k norms and biased attention), a decoder with multimodal
    rope.

    Returns:
        `transformers.GlmOcrConfig`
    """
    return transformers.GlmOcrConfig(text_config=mrope_text(), vision_config=glm_tower(), **GLM_SPECIAL_TOKENS)


def _one_frame_tower(**overrides: Any) -> dict[str, Any]:
    """A SigLIP-like tower reading one frame per 4 px patch, with a learned 4x4 position grid resampled to each
    image's grid (PaddleOCR-VL, Cosmos3 Edge), merging 2x2 patches."""
    return tiny_vision_config(
        num_hidden_layers=2, patch_size=PATCH_SIZE, num_channels=3, spatial_merge_size=MERGE_SIZE, **overrides
    )


def tiny_paddleocr_vl_config() -> transformers.PaddleOCRVLConfig:
    """A tiny PaddleOCR-VL config: images only, each patch a `(3, 4, 4)` image for a convolutional embedding; a
    decoder with multimodal rope.

    Returns:
        `transformers.PaddleOCRVLConfig`
    """
    return transformers.PaddleOCRVLConfig(
        text_config=mrope_text(), vision_config=_one_frame_tower(), **QWEN_SPECIAL_TOKENS
    )


def tiny_cosmos3_edge_config() -> transformers.Cosmos3EdgeConfig:
    """A tiny Cosmos3 Edge config: flattened one-frame patches, a video one run per frame; multimodal rope.

    Returns:
        `transformers.Cosmos3EdgeConfig`
    """
    return transformers.Cosmos3EdgeConfig(
        text_config=mrope_text(),
        vision_config=_one_frame_tower(image_size=None, num_patches=16),
        projector_hidden_size=32,
        **QWEN_SPECIAL_TOKENS,
    )


def tiny_kimi_k25_config() -> transformers.Kimi_K25Config:
    """A tiny Kimi K2.5 config: a one-layer tower pooling a chunk's frames into one, 2x2 merge kernel; a DeepSeek-V3
    decoder (latent attention; layer 0 dense, layer 1 routing to 2 of 4 experts plus a shared one).

    Returns:
        `transformers.Kimi_K25Config`
    """
    vision = tiny_vision_config(
        image_size=None,
        patch_size=PATCH_SIZE,
        pos_emb_height=4,
        pos_emb_width=4,
        pos_emb_time=4,
        merge_kernel_size=[MERGE_SIZE, MERGE_SIZE],
    )
    text = tiny_text_config(
        "deepseek_v3",
        num_key_value_heads=2,  # latent attention expands keys and values to every head
        kv_lora_rank=16,
        # With `q_lora_rank=None` (a plain `q_proj`), transformers 5.24 cannot load the model it saved: Kimi's weight
        # conversion permutes that `q_proj` as a vision projection ("shape '[2, 2, 2, 32]' is invalid").
        q_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        moe_intermediate_size=16,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        **TINY_TEXT_SPECIAL_IDS,
    )
    return transformers.Kimi_K25Config(
        text_config=text, vision_config=vision, projection_hidden_size=32, **QWEN_SPECIAL_TOKENS
    )


def tiny_ernie4_5_vl_moe_config() -> transformers.Ernie4_5_VLMoeConfig:
    """A tiny ERNIE 4.5 VL MoE config: a one-layer tower of one-frame patches whose resampler merges 2x2 patches and
    pairs of video frames; both layers routing to 2 of 4 experts (text and vision tokens apart) plus a shared one (a
    first sparse layer makes every token's routing change the last logits, not only the last token's); multimodal
    rope (height and width sections equal, as its rotary embedding interleaves them).

    Returns:
        `transformers.Ernie4_5_VLMoeConfig`
    """
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [3, 3, 2]}
    text = tiny_text_config(
        None,
        head_dim=16,
        rope_parameters=rope,
        moe_intermediate_size=[16, 16],
        moe_k=2,
        moe_num_experts=4,
        moe_num_shared_experts=1,
        mlp_layer_types=["sparse", "sparse"],
        **TINY_TEXT_SPECIAL_IDS,
    )
    vision = tiny_patch_merger_vision_config(intermediate_size=64, temporal_merge_size=2)
    del vision["temporal_patch_size"]
    return transformers.Ernie4_5_VLMoeConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=TINY_VIDEO_TOKEN_ID,
        image_start_token_id=VISION_START,
        image_end_token_id=VISION_END,
        video_start_token_id=ERNIE_VIDEO_START,
        video_end_token_id=ERNIE_VIDEO_END,
    )


def tiny_exaone4_5_config() -> transformers.Exaone4_5_Config:
    """A tiny EXAONE 4.5 config: Qwen2.5-VL's windowed tower, a decoder with one sliding and one full layer.

    Returns:
        `transformers.Exaone4_5_Config`
    """
    text = tiny_text_config(
        "exaone4", head_dim=16, sliding_window=6, layer_types=["sliding_attention", "full_attention"]
    )
    return transformers.Exaone4_5_Config(
        text_config=text, vision_config=_windowed_tower(num_key_value_heads=1), **_PLACEHOLDER_TOKENS
    )


def tiny_llava_onevision1_5_config() -> transformers.LlavaOnevision15Config:
    """A tiny LLaVA-OneVision-1.5 config (transformers 5.25+): a two-layer RICE-ViT tower reading one frame per patch
    (a class token per frame, a 2x2 merger), a Qwen3 decoder.

    Returns:
        `transformers.LlavaOnevision15Config`
    """
    # RICE-ViT has no temporal patch (`temporal_patch_size` is no attribute of its config) nor windowed layers.
    vision = two_layer_tower(model_type="llava_onevision1_5_vision")
    del vision["temporal_patch_size"]
    return transformers.LlavaOnevision15Config(
        text_config=tiny_text_config("qwen3", head_dim=16), vision_config=vision, **QWEN_SPECIAL_TOKENS
    )


def tiny_hyperclovax_vision_v2_config() -> transformers.HyperCLOVAXVisionV2Config:
    """A tiny HyperCLOVAX-Vision v2 config: EXAONE 4.5's tower (a Qwen2.5-VL tower), a HyperCLOVAX decoder.

    Returns:
        `transformers.HyperCLOVAXVisionV2Config`
    """
    return transformers.HyperCLOVAXVisionV2Config(
        text_config=tiny_text_config("hyperclovax", head_dim=16),
        vision_config=_windowed_tower(model_type="qwen2_5_vl_vision"),
        **_PLACEHOLDER_TOKENS,
    )


def tiny_lfm3_vl_config() -> transformers.Lfm3VlConfig:
    """A tiny LFM3-VL config: a one-layer tower, a hybrid decoder of one short-convolution and one attention layer.

    Returns:
        `transformers.Lfm3VlConfig`
    """
    text = tiny_text_config("lfm3", head_dim=16, layer_types=["conv", "full_attention"])
    text.update(**TINY_TEXT_SPECIAL_IDS)
    vision = tiny_vision_config(
        image_size=None,
        patch_size=PATCH_SIZE,
        num_key_value_heads=1,
        in_channels=3,
        spatial_merge_size=MERGE_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
    )
    return transformers.Lfm3VlConfig(
        text_config=text,
        vision_config=vision,
        **QWEN_SPECIAL_TOKENS,
        projector_hidden_size=32,
    )
