"""Tiny configs of the families that cut an image of any size into crops, tiles, sub-images or patch rows: LLaVA-NeXT
(-Video), LLaVA-OneVision, Idefics3, SmolVLM, Aya Vision, Cohere2 Vision, InternVL, Qianfan-OCR, GOT-OCR2, Llama 4,
LFM2-VL, Mistral3 and LightOnOCR. Their towers read 8 or 16 px crops, so an image is a few crops."""

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

# The anyres grids (height, width in px) LLaVA-NeXT's image processor picks from; an 8 px crop per tower call.
ANYRES_PINPOINTS = [[8, 8], [8, 16], [16, 8]]


def _qwen2(model_type: str = "qwen2", **overrides) -> dict:
    # `head_dim` is stated for decoders whose config lacks the attribute: the bad-input cases read `config.head_dim`.
    return tiny_text_config(model_type, head_dim=16, **overrides)


def _anyres(text_config: dict, tower: str) -> dict:
    """LLaVA-NeXT-like keyword arguments: anyres grids of 8 px crops of `tower`."""
    vision = tiny_vision_config(tower, image_size=8, projection_dim=32)
    kwargs = {"text_config": text_config, "vision_config": vision, "image_grid_pinpoints": ANYRES_PINPOINTS}
    return {**kwargs, "image_token_index": TINY_IMAGE_TOKEN_ID}


def tiny_llava_next_config() -> transformers.LlavaNextConfig:
    """A tiny LLaVA-NeXT config: anyres grids of 8 px CLIP crops, Llama decoder.

    Returns:
        `transformers.LlavaNextConfig`
    """
    return transformers.LlavaNextConfig(**_anyres(tiny_text_config(), "clip_vision_model"), vision_feature_layer=-1)


def tiny_llava_next_video_config() -> transformers.LlavaNextVideoConfig:
    """A tiny LLaVA-NeXT-Video config: LLaVA-NeXT's, with a video placeholder.

    Returns:
        `transformers.LlavaNextVideoConfig`
    """
    parts = _anyres(tiny_text_config(), "clip_vision_model")
    return transformers.LlavaNextVideoConfig(**parts, video_token_index=TINY_VIDEO_TOKEN_ID, vision_feature_layer=-1)


def tiny_llava_onevision_config() -> transformers.LlavaOnevisionConfig:
    """A tiny LLaVA-OneVision config: anyres grids of 8 px SigLIP crops, Qwen2 decoder.

    "anyres_max_1" makes every grid bigger than one crop's worth of tokens downsampled: that path is exercised too.

    Returns:
        `transformers.LlavaOnevisionConfig`
    """
    parts = _anyres(_qwen2(), "siglip_vision_model")
    return transformers.LlavaOnevisionConfig(
        **parts, video_token_index=TINY_VIDEO_TOKEN_ID, vision_aspect_ratio="anyres_max_1"
    )


def _sub_images() -> dict:
    """Idefics3-like keyword arguments: 16 px sub-images, pixel-shuffled into 4 tokens each, Llama decoder."""
    vision = tiny_vision_config(projection_dim=32)
    return {"text_config": tiny_text_config(), "vision_config": vision, "image_token_id": TINY_IMAGE_TOKEN_ID}


def tiny_idefics3_config() -> transformers.Idefics3Config:
    """A tiny Idefics3 config: 16 px sub-images, pixel-shuffled into 4 tokens each, Llama decoder.

    Returns:
        `transformers.Idefics3Config`
    """
    return transformers.Idefics3Config(**_sub_images())


def tiny_idefics2_config() -> transformers.Idefics2Config:
    """A tiny Idefics2 config: 16 px sub-images, each resampled by a one-layer perceiver into 4 latents; a Mistral
    decoder.

    Returns:
        `transformers.Idefics2Config`
    """
    perceiver = {
        "hidden_size": 32,
        "resampler_n_latents": 4,
        "resampler_depth": 1,
        "resampler_n_heads": 2,
        "resampler_head_dim": 16,
        "num_key_value_heads": 1,
    }
    # Upstream draws every latent as ones (identical latents) and the weights at 0.02: through the resampler the
    # image then moves the logits by ~2e-4; wider weights let each image matter.
    return transformers.Idefics2Config(
        text_config=tiny_text_config("mistral"),
        vision_config=tiny_vision_config(),
        perceiver_config=perceiver,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        initializer_range=0.2,
    )


def tiny_smolvlm_config() -> transformers.SmolVLMConfig:
    """A tiny SmolVLM config: Idefics3's.

    Returns:
        `transformers.SmolVLMConfig`
    """
    return transformers.SmolVLMConfig(**_sub_images())


def _aya_tiles() -> dict:
    """Aya-Vision-like keyword arguments: 16 px SigLIP tiles, a Cohere2 decoder with one sliding and one full layer."""
    text = _qwen2("cohere2", sliding_window=6, layer_types=["sliding_attention", "full_attention"])
    # Cohere2's default end-of-sequence id (255001) lies outside the tiny vocabulary.
    text["eos_token_id"] = 2
    return {"text_config": text, "vision_config": tiny_vision_config("siglip_vision_model", projection_dim=32)}


def tiny_aya_vision_config() -> transformers.AyaVisionConfig:
    """A tiny Aya Vision config: 16 px SigLIP tiles, a Cohere2 decoder with one sliding and one full layer.

    Returns:
        `transformers.AyaVisionConfig`
    """
    return transformers.AyaVisionConfig(**_aya_tiles(), image_token_index=TINY_IMAGE_TOKEN_ID)


def tiny_cohere2_vision_config() -> transformers.Cohere2VisionConfig:
    """A tiny Cohere2 Vision config: Aya Vision's tower and decoder.

    Returns:
        `transformers.Cohere2VisionConfig`
    """
    return transformers.Cohere2VisionConfig(
        **_aya_tiles(), image_token_id=TINY_IMAGE_TOKEN_ID, alignment_intermediate_size=64
    )


def _internvl_tiles(text_config: dict, tower: str | None) -> dict:
    """InternVL-like keyword arguments: 16 px tiles of 4x4 patches, CLS dropped, pixel-shuffled into 4 tokens."""
    vision = tiny_vision_config(tower)
    return {
        "text_config": text_config,
        "vision_config": vision,
        "image_token_id": TINY_IMAGE_TOKEN_ID,
        "image_seq_length": 4,
    }


def tiny_internvl_config() -> transformers.InternVLConfig:
    """A tiny InternVL config: 16 px tiles of 4x4 patches, CLS dropped, pixel-shuffled into 4 tokens; Qwen2 decoder.

    Returns:
        `transformers.InternVLConfig`
    """
    return transformers.InternVLConfig(**_internvl_tiles(_qwen2(), "internvl_vision"))


def tiny_qianfan_ocr_config() -> transformers.QianfanOCRConfig:
    """A tiny Qianfan-OCR config: InternVL's tiles, a Qwen3 decoder.

    Returns:
        `transformers.QianfanOCRConfig`
    """
    return transformers.QianfanOCRConfig(**_internvl_tiles(tiny_text_config("qwen3", head_dim=16), None))


def tiny_got_ocr2_config() -> transformers.GotOcr2Config:
    """A tiny GOT-OCR2 config: 16 px tiles through a SAM tower (8x8 patches -> 4 tokens), Qwen2 decoder.

    Returns:
        `transformers.GotOcr2Config`
    """
    return transformers.GotOcr2Config(
        text_config=_qwen2(), vision_config=tiny_sam_vision_config(), image_token_index=TINY_IMAGE_TOKEN_ID
    )


def tiny_llama4_config(attention_chunk_size: int = 8) -> transformers.Llama4Config:
    """A tiny Llama 4 config: 16 px tiles of 4x4 patches, pixel-shuffled into 4 tokens each; a decoder of a dense
    chunked-attention RoPE layer, then two NoPE full-attention layers (an MoE one, then a dense one).

    The chunks (`attention_chunk_size` tokens) are shorter than the test prompts, so a prompt crosses a chunk boundary.
    The NoPE layers scale their queries by each token's place in the cache (`attn_temperature_tuning`, a step every
    `floor_scale` tokens, here within a prompt), and a NoPE layer after another makes the first one's scales reach
    the cached keys and values (as Llama 4's NoPE layers every 4th layer do).

    Args:
        attention_chunk_size (`int`, *optional*, defaults to 8): tokens per attention chunk of the RoPE layers.

    Returns:
        `transformers.Llama4Config`
    """
    text = tiny_text_config(
        "llama4_text",
        head_dim=16,
        intermediate_size_mlp=64,
        num_local_experts=4,
        moe_layers=[1],
        num_hidden_layers=3,
        no_rope_layers=[1, 0, 0],  # 1: RoPE (and chunked attention), 0: NoPE (full attention)
        attention_chunk_size=attention_chunk_size,
        floor_scale=4,  # Llama 4's 8192, at the scale of the test prompts
        attn_scale=1.0,  # Llama 4's 0.1 moves the tiny model's cached keys by less than the tolerance
    )
    # The vision adapter pixel-shuffles 32 channels into 128 (its MLP's input is the tower's `intermediate_size`).
    vision = tiny_vision_config(
        "llama4_vision_model",
        intermediate_size=128,
        vision_output_dim=32,
        projector_input_dim=32,
        projector_output_dim=32,
    )
    return transformers.Llama4Config(
        text_config=text,
        vision_config=vision,
        image_token_index=TINY_IMAGE_TOKEN_ID,
        boi_token_index=TINY_BOI_TOKEN_ID,
        eoi_token_index=TINY_EOI_TOKEN_ID,
    )


def tiny_lfm2_vl_config() -> transformers.Lfm2VlConfig:
    """A tiny LFM2-VL config: SigLIP2 NaFlex rows of up to 16 patches, a decoder of one convolution and one
    attention layer.

    Returns:
        `transformers.Lfm2VlConfig`
    """
    return transformers.Lfm2VlConfig(
        text_config=_qwen2("lfm2", layer_types=["conv", "full_attention"]),
        vision_config=tiny_vision_config("siglip2_vision_model", image_size=None, num_patches=16),
        image_token_id=TINY_IMAGE_TOKEN_ID,
        projector_hidden_size=32,
    )


def tiny_mistral3_config() -> transformers.Mistral3Config:
    """A tiny Mistral3 config: a Pixtral tower of 2 px patches (images up to 16x16), Mistral decoder.

    Returns:
        `transformers.Mistral3Config`
    """
    return transformers.Mistral3Config(
        text_config=tiny_text_config("mistral"),
        vision_config=tiny_vision_config("pixtral", patch_size=2),
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )


def tiny_lighton_ocr_config() -> transformers.LightOnOcrConfig:
    """A tiny LightOnOCR config: Mistral3's Pixtral tower, a Qwen3 decoder.

    Returns:
        `transformers.LightOnOcrConfig`
    """
    return transformers.LightOnOcrConfig(
        text_config=tiny_text_config("qwen3", head_dim=16),
        vision_config=tiny_vision_config("pixtral", patch_size=2),
        image_token_id=TINY_IMAGE_TOKEN_ID,
    )


def tiny_idefics_config() -> transformers.IdeficsConfig:
    """A tiny IDEFICS config: 16 px images, a one-layer perceiver resampling each into 4 latents, a gated
    cross-attention layer before each of the 2 decoder layers; `image_token_id` set (IDEFICS configs lack it).

    Returns:
        `transformers.IdeficsConfig`
    """
    vision = {"embed_dim": 32, "image_size": 16, "patch_size": 4, "intermediate_size": 64}
    perceiver = {"resampler_n_latents": 4, "resampler_depth": 1, "resampler_n_heads": 2, "resampler_head_dim": 16}
    # Upstream starts the cross-attention gates at zero (images change nothing): "ones" opens them.
    return transformers.IdeficsConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        vision_config={**vision, "num_hidden_layers": 1, "num_attention_heads": 2},
        perceiver_config=perceiver,
        use_resampler=True,
        alpha_initializer="ones",
        image_token_id=TINY_IMAGE_TOKEN_ID,
        initializer_range=0.2,
    )
