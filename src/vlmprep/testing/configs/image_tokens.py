"""Tiny configs of the families with a VQ-VAE: Chameleon and Emu3 (images become its codes' tokens) and Janus (a
SigLIP tower for understanding, a VQ-VAE for image generation)."""

from __future__ import annotations

import transformers

from .parts import (
    TINY_IMAGE_SIZE,
    TINY_IMAGE_TOKEN_ID,
    TINY_TEXT_SPECIAL_IDS,
    TINY_VOCAB_SIZE,
    tiny_text_config,
    tiny_vision_config,
)

# The VQ-VAE's codebook, and the vocabulary ids its codes map to: free ids between the text (3..99) and the special
# tokens (110-121), so that a code's token is never a text token of a test prompt.
TINY_VQ_CODES = 8
TINY_FIRST_CODE_TOKEN_ID = 100
# Emu3's end-of-line token (`<|extra_200|>`), which ends every row of an image's codes.
TINY_EMU3_END_OF_LINE_ID = 119


def tiny_vq_vocabulary_map(codes: int = TINY_VQ_CODES, first_token_id: int = TINY_FIRST_CODE_TOKEN_ID) -> dict:
    """A `vocabulary_map` (token name -> id) as Chameleon's tokenizer has it: `<image>` and one `IMGIMG<code>Z` token
    per VQ code, the code written with letters (`A` is 0), so that each code maps to its own token id.

    Args:
        codes (`int`, *optional*, defaults to 8): codes of the VQ codebook.
        first_token_id (`int`, *optional*, defaults to 100): the token id of code 0 (code `c` is `first_token_id + c`).

    Returns:
        `dict[str, int]`
    """
    names = {token_id: f"token{token_id}" for token_id in range(TINY_VOCAB_SIZE)}
    names[TINY_IMAGE_TOKEN_ID] = "<image>"
    for code in range(codes):
        names[first_token_id + code] = "IMGIMG" + "".join(chr(ord("A") + int(digit)) for digit in str(code)) + "Z"
    return {name: token_id for token_id, name in names.items()}


def tiny_chameleon_config() -> transformers.ChameleonConfig:
    """A tiny Chameleon config: a VQ-VAE of 8 codes turning a 16 px image into a 4x4 grid, a 2-layer decoder.

    Upstream's tester maps every code to one token id (its `IMGIMG` names spell vocabulary ids, not codes), under
    which every image has the same tokens; here each code has its own token.

    Returns:
        `transformers.ChameleonConfig`
    """
    vq_config = {
        "embed_dim": 4,
        "num_embeddings": TINY_VQ_CODES,
        "latent_channels": 4,
        "base_channels": 32,  # the VQ-VAE's GroupNorm has 32 groups
        "channel_multiplier": [1, 2, 2],  # two downsamplings: 16 px -> 4x4 codes
        "resolution": TINY_IMAGE_SIZE,
    }
    return transformers.ChameleonConfig(
        **tiny_text_config(None), vocabulary_map=tiny_vq_vocabulary_map(), vq_config=vq_config
    )


def tiny_janus_config() -> transformers.JanusConfig:
    """A tiny Janus config: a SigLIP-like tower of 16 patches per 16 px image, a Llama decoder, and a VQ-VAE of 8 codes
    (image generation only) decoding a 8x8 grid of codes.

    Returns:
        `transformers.JanusConfig`
    """
    vision_config = tiny_vision_config(None, num_image_tokens=16, projection_dim=32)
    vq_config = {
        "embed_dim": 4,
        "num_embeddings": TINY_VQ_CODES,
        "latent_channels": 4,
        "base_channels": 32,  # the VQ-VAE's GroupNorm has 32 groups
        "channel_multiplier": [1, 2],
        # The generation aligner maps code embeddings to `projection_dim` and the generation head reads
        # `image_token_embed_dim`: both are the decoder's hidden size.
        "projection_dim": 32,
        "image_token_embed_dim": 32,
        "resolution": TINY_IMAGE_SIZE,
    }
    return transformers.JanusConfig(
        text_config=tiny_text_config(),
        vision_config=vision_config,
        vq_config=vq_config,
        image_token_id=TINY_IMAGE_TOKEN_ID,
    )


def tiny_emu3_config() -> transformers.Emu3Config:
    """A tiny Emu3 config: a VQ-VAE of 8 codes downsampling 4x (a 16 px image is a 4x4 grid of codes, 20 tokens with
    the end-of-line tokens), a 2-layer decoder.

    Returns:
        `transformers.Emu3Config`
    """
    names = {token_id: f"token{token_id}" for token_id in range(TINY_VOCAB_SIZE)}
    names[TINY_IMAGE_TOKEN_ID] = "<image>"
    names[TINY_EMU3_END_OF_LINE_ID] = "<|extra_200|>"
    for code in range(TINY_VQ_CODES):
        names[TINY_FIRST_CODE_TOKEN_ID + code] = f"<|visual token{code:06d}|>"
    vq_config = {
        "codebook_size": TINY_VQ_CODES,
        "base_channels": 32,  # the VQ-VAE's GroupNorm has 32 groups
        "hidden_size": 32,  # its attention block reads `base_channels * channel_multiplier[-1]` channels
        "channel_multiplier": [1, 1, 1],  # two downsamplings: 16 px -> 4x4 codes
        "temporal_downsample_factor": 2,
    }
    # Emu3's text config defaults to attention dropout 0.1: off, so that train mode changes nothing but the caching.
    text_config = tiny_text_config(None, **TINY_TEXT_SPECIAL_IDS, attention_dropout=0.0)
    return transformers.Emu3Config(
        text_config=text_config,
        vq_config=vq_config,
        vocabulary_map={name: token_id for token_id, name in names.items()},
    )
