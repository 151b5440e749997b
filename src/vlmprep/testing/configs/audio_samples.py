"""Tiny configs of the families whose audio placeholders are counted from a clip's waveform samples: Muse Spark
(images, videos and raw-waveform audio clips), Apertus 1.5 (images and audio clips as discrete codes of the
vocabulary) and Dots 3 Note (log-mel chunks, one audio token per 32 samples).

Muse Spark is Muse Glimmer's vision and decoder (flattened patches on a `(t, h, w)` grid, 1D positions, a sliding
layer with rope and a NoPE full layer) with a mixture-of-experts MLP, a residual gate, and a causal convolutional
audio tower reading the mono waveform (`input_values`, padded at the end to a multiple of `samples_per_token`, with
`input_values_mask`): one audio token per `prod(patch_sizes)` samples.

Apertus 1.5 tokenizes an image (cropped to its `image_sizes`) into a grid of codes, one per `f x f` pixels, and an
audio clip (a mono waveform with `padding_mask`) into one code per `hop_length` samples; codes are offset into the
vocabulary (images from `image_token_offset`, audio from `audio_token_offset`) and embedded by the decoder's table.
"""

from __future__ import annotations

import transformers

from .muse import MUSE_GLIMMER_TEXT, muse_glimmer_parts
from .parts import (
    TINY_AUDIO_TOKEN_ID,
    TINY_IMAGE_TOKEN_ID,
    TINY_TEXT_SPECIAL_IDS,
    TINY_VIDEO_TOKEN_ID,
    tiny_text_config,
)
from .patch_grid import MERGE_SIZE, PATCH_SIZE

MUSE_SPARK_PATCH_SIZES = (2, 2)  # waveform samples folded by each stage of the audio tower: 4 per audio token


def tiny_muse_spark_config() -> transformers.MuseSparkConfig:
    """A tiny Muse Spark config: Muse Glimmer's tiny vision tower and two decoder layers (a sliding one with rope, a
    full NoPE one; the first with a dense MLP, the second with 4 routed experts), and a two-stage audio tower folding
    4 waveform samples into one audio token.

    Returns:
        `transformers.MuseSparkConfig`
    """
    text = tiny_text_config(
        None,
        **MUSE_GLIMMER_TEXT,
        mlp_layer_types=["dense", "sparse"],
        num_local_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        moe_hidden_size=16,
    )
    audio = {
        "patch_sizes": list(MUSE_SPARK_PATCH_SIZES),
        "hidden_sizes": [16, 32],
        "depths": [1, 1],
        "num_hidden_layers": 2,
        "mlp_ratio": 2.0,
        "conv_kernel_size": 3,
        "out_hidden_size": 32,
    }
    return transformers.MuseSparkConfig(
        text_config=text, audio_config=audio, audio_token_id=TINY_AUDIO_TOKEN_ID, **muse_glimmer_parts()
    )


APERTUS1P5_SPATIAL_FACTOR = 2  # the vision tokenizer's two stages halve the image once: a code per 2x2 pixels
APERTUS1P5_HOP_LENGTH = 4  # waveform samples per audio code
APERTUS1P5_CODEBOOK_SIZE = 16  # codes of each tokenizer
APERTUS1P5_IMAGE_CODES = 64  # the first image code's id: image codes 64..79, audio codes 80..95


def tiny_apertus1p5_config() -> transformers.Apertus1p5Config:
    """A tiny Apertus 1.5 config: a two-layer decoder whose 128-id vocabulary holds 16 image codes and 16 audio codes
    (ids 64..95, shared with text ids: codes only ever enter as embedded rows, never as prompt ids), a two-stage vision
    tokenizer (a code per 2x2 pixels) and a WavTokenizer encoder (a code per 4 samples).

    Returns:
        `transformers.Apertus1p5Config`
    """
    image_offset = APERTUS1P5_IMAGE_CODES
    audio_offset = image_offset + APERTUS1P5_CODEBOOK_SIZE
    text = tiny_text_config(
        "apertus1p5_text",
        head_dim=16,
        # upstream's default `xielu` holds parameters its initialisation cannot rebuild: gelu, as upstream's tests
        hidden_act="gelu",
        **TINY_TEXT_SPECIAL_IDS,
    )
    vision = {
        "codebook_size": APERTUS1P5_CODEBOOK_SIZE,
        "base_channels": 32,  # the encoder's GroupNorm splits channels in 32 groups
        "channel_multiplier": [1, 1],
        "num_res_blocks": 1,
        "embed_dim": 8,
        "latent_channels": 32,
        "attn_resolutions": [],
        "resolution": 8,
    }
    audio = {
        "model_type": "wavtokenizer_encoder",
        "num_filters": 4,
        "upsampling_ratios": [2, 2],
        "hidden_size": 8,
        "codebook_dim": 8,
        "codebook_size": APERTUS1P5_CODEBOOK_SIZE,
        "num_lstm_layers": 1,
    }
    return transformers.Apertus1p5Config(
        text_config=text,
        vision_config=vision,
        audio_config=audio,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        audio_token_id=TINY_AUDIO_TOKEN_ID,
        image_token_offset=image_offset,
        audio_token_offset=audio_offset,
    )


DOTS3_NOTE_MEL_BINS = 8
DOTS3_NOTE_HOP_LENGTH = 4  # waveform samples a log-mel frame; 8 frames (32 samples) an audio token


def tiny_dots3_note_config() -> transformers.Dots3NoteConfig:
    """A tiny Dots 3 Note config: a decoder of one indexed (DeepSeek sparse) attention layer and one sliding-window
    layer (window 6), both multi-head latent attention with a mixture of experts after the first layer; a two-layer
    vision tower of 4 px patches merged 2x2 (its second layer routed experts); a two-layer audio tower over 8 mel bins.

    The indexer keeps the 512 best keys of every query: more than any test prompt holds, so its hard top-k selects every
    causal key and a cached or chunked prefill sees the keys an uncached forward sees.

    Returns:
        `transformers.Dots3NoteConfig`
    """
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_channels": 3,
        "patch_size": PATCH_SIZE,
        "spatial_merge_size": MERGE_SIZE,
        "temporal_patch_size": 1,
        "pyramid_num_routed": [-1, 2],  # a dense layer, then one of 2 routed experts
        "capacity_factor": 2,
        "adapter_in_dim": 32,
        "adapter_out_dim": 32,
        "adapter_merge_size": MERGE_SIZE,
    }
    audio = {
        "whisper_config": {
            "d_model": 32,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 64,
            "encoder_layers": 2,
            "num_mel_bins": DOTS3_NOTE_MEL_BINS,
            "max_source_positions": 64,
        },
        "feature_size": DOTS3_NOTE_MEL_BINS,
        "hop_length": DOTS3_NOTE_HOP_LENGTH,
        "downsample_hidden_size": 4,
        "adapter_input_size": 32,
        "adapter_output_size": 32,
    }
    latent_attention = {"q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8}
    return transformers.Dots3NoteConfig(
        **tiny_text_config(None, num_attention_heads=2, num_key_value_heads=2, head_dim=16),
        **latent_attention,
        # The sliding layer's latent is narrower than the indexed layer's, as in the released config (1024 and 512):
        # the config is then heterogeneous (`per_layer_config`) and refuses to answer `kv_lora_rank` globally.
        **{f"swa_{name}": value for name, value in {**latent_attention, "kv_lora_rank": 8}.items()},
        v_head_dim=8,
        swa_v_head_dim=8,
        swa_head_dim=16,
        swa_num_attention_heads=2,
        swa_num_key_value_heads=2,
        max_position_embeddings=512,
        layer_types=["indexed_attention", "sliding_attention"],
        sliding_window_size=6,
        index_n_heads=2,
        index_head_dim=16,
        index_topk=512,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        shared_experts_intermediate_size=16,
        first_k_dense_replace=1,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=TINY_VIDEO_TOKEN_ID,
        audio_token_id=TINY_AUDIO_TOKEN_ID,
        **TINY_TEXT_SPECIAL_IDS,
        vision_config=vision,
        audio_config=audio,
    )
