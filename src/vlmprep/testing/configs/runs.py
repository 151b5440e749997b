"""Tiny configs of the families whose image is several placeholder runs: MiniCPM-V 4.6, MiniCPM-o OCR and MiniCPM-V
4.7 (a global view then one run per slice, NaViT-packed, on Qwen3.5's hybrid decoder).

Their towers take images of any size in 4 px patches; a view's patch grid is merged 4x4 into placeholders (a 2x2
window merger inside the tower, then a 2x2 merger), so the views of the cases are 4-8 patches a side.
"""

from __future__ import annotations

from typing import Any

import transformers

from .hybrid import _gated_delta_net_text
from .parts import TINY_IMAGE_TOKEN_ID, TINY_VIDEO_TOKEN_ID, tiny_text_config, tiny_vision_config

# A line break, which MiniCPM's processors put between rows of slices (a text token of the tiny vocabulary).
MINICPM_LINE_BREAK_ID = 9
# The side, in patches, of the largest view; the tower's position table has this many positions a side.
MINICPM_MAX_VIEW_SIDE = 8


def _minicpm_parts() -> dict[str, Any]:
    # The window merger after the first of the tower's two layers (`insert_layer_id` 0, default 6 > its layers), so
    # the second layer runs on the merged windows; the decoder is Qwen3.5's (one Gated DeltaNet, one attention layer).
    vision = tiny_vision_config(num_hidden_layers=2, image_size=4 * MINICPM_MAX_VIEW_SIDE, patch_size=4)
    text = _gated_delta_net_text(pad_token_id=0)
    return {
        "text_config": text,
        "vision_config": vision,
        "insert_layer_id": 0,
        "image_token_id": TINY_IMAGE_TOKEN_ID,
        "video_token_id": TINY_VIDEO_TOKEN_ID,
    }


def tiny_minicpmv4_6_config() -> transformers.MiniCPMV4_6Config:
    """A tiny MiniCPM-V 4.6 config: a two-layer SigLIP tower with its window merger after the first layer, a 2x2
    merger, and Qwen3.5's hybrid decoder (one Gated DeltaNet layer, one attention layer).

    Returns:
        `transformers.MiniCPMV4_6Config`
    """
    return transformers.MiniCPMV4_6Config(**_minicpm_parts())


def tiny_minicpm_ocr_config() -> transformers.MiniCPMOcrConfig:
    """A tiny MiniCPM-o OCR config: MiniCPM-V 4.6's tower, mergers and decoder.

    Returns:
        `transformers.MiniCPMOcrConfig`
    """
    return transformers.MiniCPMOcrConfig(**_minicpm_parts())


def tiny_minicpmv4_7_config() -> transformers.MiniCPMV4_7Config:
    """A tiny MiniCPM-V 4.7 config: MiniCPM-V 4.6's tower, mergers and decoder (with interleaved multimodal rope), and
    the marker ids its canvas positions read (`<image>` 112, `</image>` 113, `<slice>` 114, `</slice>` 115, a line
    break 9).

    Returns:
        `transformers.MiniCPMV4_7Config`
    """
    markers = {"image_start_id": 112, "image_end_id": 113, "slice_start_id": 114, "slice_end_id": 115}
    return transformers.MiniCPMV4_7Config(**_minicpm_parts(), **markers, newline_id=MINICPM_LINE_BREAK_ID)


def tiny_step3p7_config() -> transformers.Step3p7Config:
    """A tiny Step-3.7 config: a one-layer tower of 4 px patches whose two stride-2 convolutions merge 4x4 patches
    into one placeholder (a 32 px global view: 4, a 16 px crop: 1); a decoder of one sliding-window layer (a window of
    6 tokens, so prompts exceed it) and one full layer, each routing to 2 of 4 experts plus a shared one.

    Returns:
        `transformers.Step3p7Config`
    """
    vision = tiny_vision_config(image_size=32, patch_size=4, mlp_ratio=2.0)
    text = tiny_text_config(None, head_dim=16, max_position_embeddings=256, pad_token_id=0, bos_token_id=1)
    text.update(eos_token_id=2, layer_types=["sliding_attention", "full_attention"], sliding_window=6)
    text.update(moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2, share_expert_dim=16)
    return transformers.Step3p7Config(vision_config=vision, text_config=text, image_token_id=TINY_IMAGE_TOKEN_ID)
