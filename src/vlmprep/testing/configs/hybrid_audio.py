"""Tiny configs of the families whose images and audio clips reach a hybrid decoder, with layers that keep a state
besides keys and values: Inkling (`inkling_mm_model`, short convolutions) and Nemotron-H Omni (Mamba-2)."""

from __future__ import annotations

import transformers

from .parts import (
    TINY_AUDIO_TOKEN_ID,
    TINY_BOA_TOKEN_ID,
    TINY_BOI_TOKEN_ID,
    TINY_IMAGE_TOKEN_ID,
    TINY_TEXT_SPECIAL_IDS,
    TINY_VIDEO_TOKEN_ID,
    tiny_text_config,
)

INKLING_PATCH_SIZE = 4
INKLING_TEMPORAL_PATCH = 2  # the image processor repeats an image's patch in time to the tower's temporal patch
INKLING_MEL_BINS = 4
INKLING_MEL_VOCAB = 8  # dMel levels per mel bin


def tiny_inkling_mm_model_config() -> transformers.InklingConfig:
    """A tiny Inkling config: a 4-layer tower folding each 2x4x4 px patch on its own into one placeholder's
    features; an audio tower embedding each frame's 4 dMel bins (8 levels each); a decoder of one sliding-window layer
    (a window of 6 tokens, so prompts exceed it) and one full layer, each with its short convolutions (running states),
    layer 0 dense, layer 1 routing to 2 of 4 experts.

    Returns:
        `transformers.InklingConfig`
    """
    text = tiny_text_config(None, head_dim=16, swa_num_attention_heads=2, swa_num_key_value_heads=1, swa_head_dim=16)
    text.update(sliding_window_size=6, d_rel=4, rel_extent=8, log_scaling_n_floor=8)
    text.update(layer_types=["hybrid_sliding", "hybrid"], mlp_layer_types=["dense", "sparse"])
    text.update(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, n_shared_experts=1)
    # The head reads hidden states divided by this width multiplier (24 by default): 1 keeps tiny logits apart
    text.update(logits_mup_width_multiplier=1.0, unpadded_vocab_size=128, pad_token_id=0, bos_token_id=1)
    text.update(eos_token_id=2)
    # 4 layers, one per scale of a 2x4x4 patch (so the tower plans its scales without scipy's assignment)
    vision = {
        "patch_size": INKLING_PATCH_SIZE,
        "temporal_patch_size": INKLING_TEMPORAL_PATCH,
        "num_channels": 3,
        "num_hidden_layers": 4,
        "text_hidden_size": 32,
    }
    audio = {"n_mel_bins": INKLING_MEL_BINS, "mel_vocab_size": INKLING_MEL_VOCAB, "text_hidden_size": 32}
    return transformers.InklingConfig(
        text_config=text,
        vision_config=vision,
        audio_config=audio,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        audio_token_id=TINY_AUDIO_TOKEN_ID,
        image_bos_token_id=TINY_BOI_TOKEN_ID,
        audio_bos_token_id=TINY_BOA_TOKEN_ID,
    )


NEMOTRON_PATCH_SIZE = 4
NEMOTRON_MEL_BINS = 16


def tiny_nemotron_h_omni_config(
    layers_block_type: tuple[str, ...] = ("linear_attention", "full_attention"),
) -> transformers.NemotronH_Omni_Reasoning_V3_Config:
    """A tiny Nemotron-H Omni config: a one-layer RADIO tower on 4 px patches, pixel-shuffled 2x2; a one-layer
    Parakeet audio tower subsampling 16-bin frames 4x; a decoder of a mamba layer (4 heads of 8, state 8, convolution
    of 4, scanned in chunks of 4) and an attention layer.

    Args:
        layers_block_type (`tuple[str, ...]`, *optional*, defaults to `("linear_attention", "full_attention")`):
            the decoder's layers; a `"moe"` layer routes to 2 of 4 experts and caches nothing.

    Returns:
        `transformers.NemotronH_Omni_Reasoning_V3_Config`
    """
    text = tiny_text_config(None, head_dim=16, **TINY_TEXT_SPECIAL_IDS)
    text.update(layers_block_type=list(layers_block_type), intermediate_size=32, n_routed_experts=4)
    text.update(moe_intermediate_size=16, moe_shared_expert_intermediate_size=16, num_experts_per_tok=2)
    text.update(ssm_state_size=8, mamba_num_heads=4, mamba_n_groups=2, mamba_head_dim=8)
    text.update(mamba_d_conv=4, mamba_expand=1, mamba_chunk_size=4, num_nextn_predict_layers=0)
    text.pop("num_hidden_layers")  # the block types give the layers
    vision = {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "mlp_ratio": 2.0,
        "patch_size": NEMOTRON_PATCH_SIZE,
        "image_size": 16,
        "max_img_size": 32,
        "num_cls_tokens": 2,
        "num_registers": 1,
        "video_temporal_patch_size": 2,
    }
    audio = {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "subsampling_factor": 4,
        "subsampling_conv_channels": 4,
        "num_mel_bins": NEMOTRON_MEL_BINS,
        "conv_kernel_size": 3,
        "projection_hidden_size": 32,
        "projection_bias": False,
    }
    return transformers.NemotronH_Omni_Reasoning_V3_Config(
        text_config=text,
        vision_config=vision,
        audio_config=audio,
        projector_hidden_size=32,
        vision_hidden_size=32,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=TINY_VIDEO_TOKEN_ID,
        audio_token_id=TINY_AUDIO_TOKEN_ID,
    )
