"""Tiny configs of the hybrid-decoder families on patch-grid towers: Qwen3.5(-MoE) (Gated DeltaNet), GLM-5-Next
(linear and indexed attention) and Inkling2(-Loop) (layers with short convolutions and linear attention besides
attention). Their towers and special tokens are those of `vlmprep.testing.configs.patch_grid`.
"""

from __future__ import annotations

from typing import Any

import transformers

from .parts import TINY_IMAGE_TOKEN_ID, TINY_TEXT_SPECIAL_IDS, tiny_text_config, tiny_vision_config
from .patch_grid import (
    GLM_SPECIAL_TOKENS,
    MERGE_SIZE,
    PATCH_SIZE,
    QWEN_SPECIAL_TOKENS,
    glm_tower,
    mrope_text,
    two_layer_tower,
)


def _gated_delta_net_text(**overrides: Any) -> dict[str, Any]:
    # One Gated DeltaNet layer (conv kernel 4, 2 key heads shared by 4 value heads) then one attention layer; half the
    # head dim is rotary, its 4 frequencies interleaved over the (t, h, w) position rows.
    text = {key: value for key, value in mrope_text().items() if key != "pad_token_id"}
    rope = {"mrope_section": [2, 1, 1], "mrope_interleaved": True, "partial_rotary_factor": 0.5}
    text["rope_parameters"] = {**text["rope_parameters"], **rope}
    text.update(layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=4)
    text.update(linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4)
    return {**text, **overrides}


def tiny_qwen3_5_config() -> transformers.Qwen3_5Config:
    """A tiny Qwen3.5 config: a Qwen3-VL-like tower without deepstack, a hybrid decoder of one Gated DeltaNet layer and
    one attention layer with interleaved multimodal rope.

    Returns:
        `transformers.Qwen3_5Config`
    """
    vision = two_layer_tower(num_position_embeddings=16)
    config = transformers.Qwen3_5Config(
        text_config=_gated_delta_net_text(), vision_config=vision, **QWEN_SPECIAL_TOKENS
    )
    config.text_config.pad_token_id = 0
    return config


def tiny_qwen3_5_moe_config() -> transformers.Qwen3_5MoeConfig:
    """A tiny Qwen3.5-MoE config: Qwen3.5's tower and hybrid decoder, each layer routing to 2 of 4 experts plus a
    shared one.

    Returns:
        `transformers.Qwen3_5MoeConfig`
    """
    text = _gated_delta_net_text(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    text.update(shared_expert_intermediate_size=16)
    vision = two_layer_tower(num_position_embeddings=16)
    config = transformers.Qwen3_5MoeConfig(text_config=text, vision_config=vision, **QWEN_SPECIAL_TOKENS)
    config.text_config.pad_token_id = 0
    return config


def tiny_glm5_next_config() -> transformers.Glm5NextConfig:
    """A tiny GLM-5-Next config: GLM-4V's tower; a decoder of one linear-attention layer (a running state) and one
    indexed-attention layer whose indexer keeps 4 of every query's keys (pooled by 2), so prompts exceed it; layer 0
    dense, layer 1 routes to 2 of 4 experts; 2 hyper-connection streams.

    Returns:
        `transformers.Glm5NextConfig`
    """
    text = tiny_text_config(None, num_key_value_heads=2, head_dim=16, **TINY_TEXT_SPECIAL_IDS)
    text.update(layer_types=["linear_attention", "full_attention"], linear_num_heads=2, linear_head_dim=16)
    text.update(linear_conv_kernel_dim=2, q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=16, v_head_dim=16)
    text.update(index_topk=4, index_head_dim=16, index_n_heads=2, index_kpool=2, hc_mult=2)
    text.update(
        mlp_layer_types=["dense", "sparse"], n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16
    )
    return transformers.Glm5NextConfig(text_config=text, vision_config=glm_tower(), **GLM_SPECIAL_TOKENS)


def _inkling2_parts() -> tuple[dict[str, Any], dict[str, Any]]:
    text = tiny_text_config(None, head_dim=16, swa_num_attention_heads=2, swa_num_key_value_heads=1, swa_head_dim=16)
    text.update(sliding_window_size=6, d_rel=4, rel_extent=8, log_scaling_n_floor=8, n_layers_per_attn_res_block=1)
    text.update(layer_types=["hybrid_sliding", "hybrid"], unpadded_vocab_size=128, pad_token_id=0, bos_token_id=1)
    text.update(eos_token_id=2, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    vision = tiny_vision_config(
        image_size=None,
        patch_size=PATCH_SIZE,
        spatial_merge_size=MERGE_SIZE,
        posemb_grid_size=4,
        projection_hidden_dim=32,
        text_hidden_size=32,
    )
    return text, vision


def tiny_inkling2_config() -> transformers.Inkling2Config:
    """A tiny Inkling2 config: a one-layer tower merging 2x2 patches of 4 px (one 8x8 px pixel square per
    placeholder); a decoder of one sliding-window layer (a window of 6 tokens, so prompts exceed it) and one full
    layer, each with its short convolutions and linear attention (running states), routing to 2 of 4 experts.

    Returns:
        `transformers.Inkling2Config`
    """
    text, vision = _inkling2_parts()
    return transformers.Inkling2Config(text_config=text, vision_config=vision, image_token_id=TINY_IMAGE_TOKEN_ID)


def tiny_inkling2_loop_config() -> transformers.Inkling2LoopConfig:
    """A tiny Inkling2-Loop config: Inkling2's tower and layers, the second layer looped twice (three layer passes
    per forward, each with its own cache layer).

    Returns:
        `transformers.Inkling2LoopConfig`
    """
    text, vision = _inkling2_parts()
    text.update(loop_layer_index_start=1, loop_layer_index_end=2, loop_num_passes=2, loop_gate_rank=4)
    return transformers.Inkling2LoopConfig(
        text_config=text,
        vision_config={**vision, "model_type": "inkling2_vision"},
        image_token_id=TINY_IMAGE_TOKEN_ID,
    )
