"""Tiny configs of the omni families of issue 26: Muse Spark (images, videos and raw-waveform audio clips).

Muse Spark is Muse Glimmer's vision and decoder (flattened patches on a `(t, h, w)` grid, 1D positions, a sliding
layer with rope and a NoPE full layer) with a mixture-of-experts MLP, a residual gate, and a causal convolutional
audio tower reading the mono waveform (`input_values`, padded at the end to a multiple of `samples_per_token`, with
`input_values_mask`): one audio token per `prod(patch_sizes)` samples.
"""

from __future__ import annotations

import transformers

from .parts import TINY_AUDIO_TOKEN_ID, TINY_IMAGE_TOKEN_ID, TINY_VIDEO_TOKEN_ID, tiny_text_config, tiny_vision_config
from .patch_grid import MERGE_SIZE, PATCH_SIZE, TEMPORAL_PATCH_SIZE

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
        head_dim=16,
        sliding_window=6,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        mlp_layer_types=["dense", "sparse"],
        num_local_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        moe_hidden_size=16,
    )
    vision = tiny_vision_config(
        num_hidden_layers=2,
        image_size=None,
        patch_size=PATCH_SIZE,
        patch_temporal=TEMPORAL_PATCH_SIZE,
        merge_size=MERGE_SIZE,
        pos_emb_height=4,
        pos_emb_width=4,
        max_position_embeddings=16,
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
        text_config=text,
        vision_config=vision,
        audio_config=audio,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=TINY_VIDEO_TOKEN_ID,
        audio_token_id=TINY_AUDIO_TOKEN_ID,
        out_hidden_size=32 * MERGE_SIZE**2,  # the tower's width after its pixel shuffle
        projector_hidden_size=32,
    )
