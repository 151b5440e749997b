"""Tiny configs of the families whose audio clips are log-mel frames with a mask of the real ones, subsampled by the
audio tower into placeholders: Gemma 4 and the Qwen-Omni thinkers, images (and videos) and audio clips in one prompt.

Gemma 4: images are rows of flattened 4 px patches with their `(x, y)` positions (`image_position_ids`, `-1` on the
padding patches), pooled 2x2 into one soft token; an audio clip is 16-bin log-mel frames (`input_features`, padded to
the longest clip, `input_features_mask`) subsampled 4x by two strided convolutions into one soft token per 4 frames.
"""

from __future__ import annotations

import transformers

from .parts import (
    TINY_AUDIO_TOKEN_ID,
    TINY_BOA_TOKEN_ID,
    TINY_BOI_TOKEN_ID,
    TINY_EOA_TOKEN_ID,
    TINY_EOI_TOKEN_ID,
    TINY_IMAGE_TOKEN_ID,
    TINY_VIDEO_TOKEN_ID,
    tiny_text_config,
)
from .patch_grid import QWEN_SPECIAL_TOKENS, _windowed_tower, mrope_text, two_layer_tower

GEMMA4_PATCH_SIZE = 4
GEMMA4_POOLING = 2
GEMMA4_MAX_PATCHES = 16  # the image processor pads every image's patch rows to this count
GEMMA4_MEL_BINS = 16  # the audio tower's input projection is sized for 16 bins after its 4x frequency subsampling


def tiny_gemma4_config(
    sliding_window: int = 6, with_audio: bool = True, bidirectional: str | None = "vision", global_head_dim: int = 32
) -> transformers.Gemma4Config:
    """A tiny Gemma 4 config: one sliding and one full attention layer with per-layer inputs, a 2-layer vision tower
    and (by default) a 2-layer audio tower.

    Args:
        sliding_window (`int`, *optional*, defaults to 6): window of the sliding layer, shorter than the prompts.
        with_audio (`bool`, *optional*, defaults to `True`): `False` builds a checkpoint without an audio tower.
        bidirectional (`str`, *optional*, defaults to `"vision"`):
            `use_bidirectional_attention`: `"vision"` makes each image run bidirectional on the sliding layer.
        global_head_dim (`int`, *optional*, defaults to 32):
            Head dimension of the full-attention layer. Unlike the sliding layer's 16, as in every real Gemma 4 (256
            and 512): the config is then heterogeneous (`per_layer_config`) and refuses to answer `head_dim` globally.

    Returns:
        `transformers.Gemma4Config`
    """
    text = tiny_text_config(
        None,
        head_dim=16,
        global_head_dim=global_head_dim,
        sliding_window=sliding_window,
        layer_types=["sliding_attention", "full_attention"],
        vocab_size_per_layer_input=128,
        hidden_size_per_layer_input=8,
        use_bidirectional_attention=bidirectional,
        max_position_embeddings=1024,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
    )
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "patch_size": GEMMA4_PATCH_SIZE,
        "pooling_kernel_size": GEMMA4_POOLING,
        "position_embedding_size": 64,
    }
    audio = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "subsampling_conv_channels": [16, 8],
        "conv_kernel_size": 3,
        "attention_chunk_size": 4,
        "attention_context_left": 5,
        "attention_context_right": 0,
        "output_proj_dims": 32,
        # Clipped linears hold infinite bounds until a checkpoint sets them: off, as in transformers' own tests.
        "use_clipped_linears": False,
    }
    return transformers.Gemma4Config(
        text_config=text,
        vision_config=vision,
        audio_config=audio if with_audio else None,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=TINY_VIDEO_TOKEN_ID,
        audio_token_id=TINY_AUDIO_TOKEN_ID,
        boi_token_id=TINY_BOI_TOKEN_ID,
        eoi_token_id=TINY_EOI_TOKEN_ID,
        boa_token_id=TINY_BOA_TOKEN_ID,
        eoa_token_index=TINY_EOA_TOKEN_ID,
    )


QWEN_OMNI_MEL_BINS = 16
QWEN_OMNI_AUDIO_START, QWEN_OMNI_AUDIO_END = 112, 113


def qwen_omni_audio(**overrides) -> dict:
    """A two-layer Qwen-Omni audio tower, 32 wide, over `QWEN_OMNI_MEL_BINS` mel bins (both thinkers').

    Args:
        overrides: its windows, positions and initialisation, which each thinker sets.

    Returns:
        `dict`: an `audio_config`.
    """
    base = {
        "d_model": 32,
        "encoder_layers": 2,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "num_mel_bins": QWEN_OMNI_MEL_BINS,
        "output_dim": 32,
    }
    return {**base, **overrides}


def tiny_qwen2_5_omni_config() -> transformers.Qwen2_5OmniThinkerConfig:
    """A tiny Qwen2.5-Omni thinker config: Qwen2.5-VL's windowed two-layer tower, a two-layer audio tower over 16 mel
    bins (windows of `2 * n_window` frames, one token per 4 frames), a decoder with multimodal rope.

    Returns:
        `transformers.Qwen2_5OmniThinkerConfig`
    """
    # At upstream's 0.02 two clips move the tiny model's logits by under 1e-3: too little to tell them apart
    audio = qwen_omni_audio(max_source_positions=64, n_window=4, initializer_range=0.1)
    vision = _windowed_tower(tokens_per_second=2)
    config = transformers.Qwen2_5OmniThinkerConfig(
        text_config={**mrope_text(), "model_type": "qwen2_5_omni_text"},
        vision_config=vision,
        audio_config=audio,
        image_token_index=TINY_IMAGE_TOKEN_ID,
        video_token_index=TINY_VIDEO_TOKEN_ID,
        audio_token_index=TINY_AUDIO_TOKEN_ID,
        audio_start_token_id=QWEN_OMNI_AUDIO_START,
        audio_end_token_id=QWEN_OMNI_AUDIO_END,
    )
    # Not an argument of the config's constructor; `get_rope_index` finds images and videos after it
    config.vision_start_token_id = QWEN_SPECIAL_TOKENS["vision_start_token_id"]
    return config


# The Qwen3-Omni thinker: Qwen3-VL's images and videos (deepstack), audio clips, a MoE decoder. Its audio tower cuts a
# clip's log-mel frames into windows of `2 * n_window` frames, each subsampled 8x by three strided convolutions; the
# processor's count of audio placeholders hard-codes the 13 tokens of a full 100-frame window, so `n_window` keeps
# upstream's 50 (the tiny clips fit one window: 40 frames give 5 tokens).
QWEN3_OMNI_N_WINDOW = 50
# Position ids per second of a video (upstream's default is 25): small, so a tiny video's frames and its audio track
# interleave under `use_audio_in_video` (frames 2 seconds apart are 4 positions apart, audio tokens 1 apart)
QWEN3_OMNI_POSITIONS_PER_SECOND = 2


def tiny_qwen3_omni_moe_config() -> transformers.Qwen3OmniMoeThinkerConfig:
    """A tiny Qwen3-Omni thinker config: Qwen3-VL's two-layer tower (deepstack from vision layer 0), a two-layer audio
    tower over 16 mel bins, a decoder whose layers route to 2 of 4 experts, with interleaved multimodal rope.

    Returns:
        `transformers.Qwen3OmniMoeThinkerConfig`
    """
    audio = qwen_omni_audio(
        max_source_positions=32,
        n_window=QWEN3_OMNI_N_WINDOW,
        n_window_infer=2 * QWEN3_OMNI_N_WINDOW,
        downsample_hidden_size=8,
        # At upstream's 0.02 (and at 0.1) two clips move the last logits by under 1e-3: too little to tell them apart
        initializer_range=0.2,
    )
    vision = two_layer_tower(num_position_embeddings=16, deepstack_visual_indexes=[0])
    text = {key: value for key, value in mrope_text().items() if key != "intermediate_size"}
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_interleaved": True}
    text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, model_type="qwen3_omni_moe_text")
    config = transformers.Qwen3OmniMoeThinkerConfig(
        text_config=text,
        vision_config=vision,
        audio_config=audio,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=TINY_VIDEO_TOKEN_ID,
        audio_token_id=TINY_AUDIO_TOKEN_ID,
        audio_start_token_id=QWEN_OMNI_AUDIO_START,
        position_id_per_seconds=QWEN3_OMNI_POSITIONS_PER_SECOND,
    )
    # Not arguments of the config's constructor: `get_rope_index` finds images and videos after the vision start
    config.vision_start_token_id = QWEN_SPECIAL_TOKENS["vision_start_token_id"]
    config.audio_end_token_id = QWEN_OMNI_AUDIO_END
    return config
