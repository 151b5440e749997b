"""Tiny configs of Cosmos3 Omni, Inkling (`inkling_mm_model`) and Nemotron-H Omni.

Cosmos3 Omni's reasoner is Qwen3-VL's vision tower and text decoder under its own config: the same tiny parts as
`tiny_qwen3_vl_config` (a deepstack layer, interleaved multimodal rope).
"""

from __future__ import annotations

import transformers

from .patch_grid import QWEN_SPECIAL_TOKENS, tiny_qwen3_vl_config


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
