"""Tiny configs of the indexed-attention families: decoders whose attention layers keep an indexer's keys in the
cache (the prefix store holds them per token, `vlmprep.cache.layer_extras`). Towers and special tokens are those of
`vlmprep.testing.configs.patch_grid`.
"""

from __future__ import annotations

import transformers

from .parts import (
    TINY_IMAGE_TOKEN_ID,
    TINY_TEXT_SPECIAL_IDS,
    TINY_VIDEO_TOKEN_ID,
    tiny_text_config,
    tiny_vision_config,
)
from .patch_grid import (
    MERGE_SIZE,
    PATCH_SIZE,
    QWEN_SPECIAL_TOKENS,
    TEMPORAL_PATCH_SIZE,
    mrope_text,
    two_layer_tower,
)


def tiny_qwen4_exp_config() -> transformers.Qwen4ExpConfig:
    """A tiny Qwen4-exp config: Qwen3.5's tower; a decoder of one Gated DeltaNet layer carrying per-layer n-gram
    embeddings (bigrams and trigrams of the preceding tokens, hashed; a dilated convolution over them) and one
    indexed-attention layer whose indexer keeps 4 keys per query (compressed by 2), so prompts exceed it; 2
    hyper-connection streams, routing to 2 of 4 experts.

    Returns:
        `transformers.Qwen4ExpConfig`
    """
    text = mrope_text(layer_types=["linear_attention", "indexed_attention"])
    rope = {"mrope_section": [2, 1, 1], "mrope_interleaved": True, "partial_rotary_factor": 0.5}
    text["rope_parameters"] = {**text["rope_parameters"], **rope}
    text.update(linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8)
    text.update(linear_num_key_heads=2, linear_num_value_heads=4, hc_count=2, hc_lowrank=8)
    text.update(ple_layer_ids=[1], ple_embed_dim=16, ple_conv_kernel_size=2, ngram_size=3, heads_per_ngram=2)
    text.update(ngram_vocab_size_base=31, make_ngram_vocab_size_divisible_by=8, split_ngram_parts=4)
    text.update(indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=8, indexer_budget=4, indexer_compress_ratio=2)
    text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16)
    vision = two_layer_tower(num_position_embeddings=16)
    return transformers.Qwen4ExpConfig(text_config=text, vision_config=vision, **QWEN_SPECIAL_TOKENS)


def tiny_minimax_m3_vl_config() -> transformers.MiniMaxM3VLConfig:
    """A tiny MiniMax M3 VL config: a one-layer tower merging 2x2 patches; a decoder of one full-attention layer with
    a dense MLP and one sparse layer whose lightning indexer keeps 2 blocks of 4 keys per query (plus its own block),
    so prompts exceed it, routing to 2 of 4 experts.

    Returns:
        `transformers.MiniMaxM3VLConfig`
    """
    text = tiny_text_config(None, head_dim=16, rotary_dim=8, **TINY_TEXT_SPECIAL_IDS)
    text.update(layer_types=["full_attention", "minimax_m3_sparse"], mlp_layer_types=["dense", "sparse"])
    text.update(num_local_experts=4, num_experts_per_tok=2, intermediate_size=16, dense_intermediate_size=32)
    text.update(shared_intermediate_size=16, index_n_heads=2, index_head_dim=16, index_block_size=4)
    text.update(index_topk_blocks=2, index_local_blocks=1)
    vision = tiny_vision_config(
        image_size=None, patch_size=PATCH_SIZE, spatial_merge_size=MERGE_SIZE, temporal_patch_size=TEMPORAL_PATCH_SIZE
    )
    return transformers.MiniMaxM3VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_index=TINY_IMAGE_TOKEN_ID,
        video_token_index=TINY_VIDEO_TOKEN_ID,
        projector_hidden_size=32,
    )


def tiny_mistral_large4_config() -> transformers.MistralLarge4Config:
    """A tiny Mistral Large 4 config: Mistral3's Pixtral tower of 2 px patches; a decoder of two indexed-attention
    layers (its indexer keeps 4 keys per query, so prompts exceed it), the second reading the first's latent K/V
    (KV sharing) with its own indexer, routing to 2 of 4 experts.

    Returns:
        `transformers.MistralLarge4Config`
    """
    text = tiny_text_config(None, num_key_value_heads=2, **TINY_TEXT_SPECIAL_IDS)
    text.update(kv_source_layers=[0, 0], indexer_types=["full", "full"], no_rope_layers=[1, 1])
    text.update(first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    text.update(intermediate_size=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16)
    # 8 indexer heads: a key's index score is a sum of ReLUs over heads, exactly 0 (tied with other keys, whose order
    # top-k then takes from the sequence length, upstream too) only when every head's is; 2 heads tied often
    text.update(index_topk=4, index_head_dim=16, index_n_heads=8)
    return transformers.MistralLarge4Config(
        text_config=text,
        vision_config=tiny_vision_config("pixtral", patch_size=2),
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )


def tiny_hy_v4_vl_config() -> transformers.HYV4VLConfig:
    """A tiny HY-V4-VL config: a one-layer tower of 4 px patches merged 2x2 (a newline after each merged row); a
    decoder of two indexed-attention layers (latent attention; the indexer keeps 4 keys per query, so prompts exceed
    it) with 2 hyper-connection streams and multimodal rope over the (t, h, w) axes, routing to 2 of 4 experts.

    Returns:
        `transformers.HYV4VLConfig`
    """
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}
    text = tiny_text_config(None, **TINY_TEXT_SPECIAL_IDS, rope_parameters=rope)
    text.update(q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=16)
    text.update(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, intermediate_size=32)
    # 8 indexer heads, as Mistral Large 4's: fewer ReLU-summed index scores tie at exactly 0
    text.update(index_topk=4, index_head_dim=16, index_n_heads=8, indexer_types=["full", "full"], hc_mult=2)
    vision = tiny_vision_config(
        image_size=None, num_channels=3, spatial_merge_size=MERGE_SIZE, max_image_size=32, out_hidden_size=32
    )
    return transformers.HYV4VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=TINY_VIDEO_TOKEN_ID,
    )
