"""Tiny random-weight model configs for tests, demos and benchmarks: one builder per drop-in family.

Every builder returns a transformers config small enough to run on a CPU in milliseconds (2 decoder layers, hidden
size 32, images of 8-32 px), made of the shared parts of `parts` (special token ids `TINY_*`, a tiny decoder, tiny
vision towers). Token ids above 100 are reserved for special tokens so that random text ids (drawn from 3..99) never
collide with them. The registry (`vlmprep.models.registry.FAMILY_SPECS`) names each drop-in's builder;
`tiny_config` looks it up by model type.

- `fixed_size`: one image size (Gemma3, PaliGemma, LLaVA, VipLLaVA, Video-LLaVA, DeepSeek-VL(-Hybrid), Aria);
- `crops`: images of any size cut into crops, tiles, sub-images or patch rows (LLaVA-NeXT, Idefics3, InternVL, ...);
- `image_tokens`: images made vocabulary tokens by a VQ-VAE (Chameleon, Emu3), or with a VQ-VAE for image generation (Janus);
- `linear_patches`: flattened patches embedded by one linear layer (Fuyu);
- `misc`: the Q-Former families, whose learned queries fill a fixed run per image (BLIP-2, InstructBLIP);
- `patch_grid`: flattened patches with a `(t, h, w)` grid per image (Qwen-VL, GLM-4V, EXAONE 4.5, ...), and `muse`
  Muse Glimmer's (whose parts Muse Spark reuses).
"""

from __future__ import annotations

from collections.abc import Callable

from transformers import PreTrainedConfig

from ...models.registry import FAMILY_SPECS
from .crops import (
    tiny_aya_vision_config,
    tiny_cohere2_vision_config,
    tiny_got_ocr2_config,
    tiny_idefics2_config,
    tiny_idefics3_config,
    tiny_idefics_config,
    tiny_internvl_config,
    tiny_lfm2_vl_config,
    tiny_lighton_ocr_config,
    tiny_llava_next_config,
    tiny_llava_next_video_config,
    tiny_llava_onevision_config,
    tiny_mistral3_config,
    tiny_qianfan_ocr_config,
    tiny_smolvlm_config,
)
from .deepstack import tiny_granite4_vision_config, tiny_granite_docling_config
from .fixed_size import (
    tiny_aria_config,
    tiny_deepseek_vl_config,
    tiny_deepseek_vl_hybrid_config,
    tiny_gemma3_config,
    tiny_llava_config,
    tiny_paligemma_config,
    tiny_video_llava_config,
    tiny_vipllava_config,
)
from .hybrid import (
    tiny_glm5_next_config,
    tiny_inkling2_config,
    tiny_inkling2_loop_config,
    tiny_qwen3_5_config,
    tiny_qwen3_5_moe_config,
)
from .image_tokens import tiny_chameleon_config, tiny_emu3_config, tiny_janus_config
from .indexed import (
    tiny_hy_v4_vl_config,
    tiny_minimax_m3_vl_config,
    tiny_mistral_large4_config,
    tiny_qwen4_exp_config,
)
from .indicators import tiny_ovis2_5_config, tiny_ovis2_config
from .ivideo import tiny_deepseek_ocr2_config, tiny_instructblipvideo_config
from .linear_patches import tiny_fuyu_config
from .merge_sized_grid import tiny_hunyuan_vl_config, tiny_video_llama_3_config
from .misc import tiny_blip_2_config, tiny_instructblip_config
from .molmo2 import tiny_molmo2_config
from .muse import tiny_muse_glimmer_config
from .omni import tiny_gemma4_config, tiny_qwen2_5_omni_config
from .omnib import tiny_apertus1p5_config, tiny_dots3_note_config, tiny_muse_spark_config
from .omnic import tiny_cosmos3_omni_config, tiny_inkling_mm_model_config, tiny_nemotron_h_omni_config
from .parts import tiny_sam_vision_config, tiny_text_config, tiny_vision_config
from .patch_grid import (
    tiny_cohere_compass_config,
    tiny_cosmos3_edge_config,
    tiny_ernie4_5_vl_moe_config,
    tiny_exaone4_5_config,
    tiny_glm4v_config,
    tiny_glm4v_moe_config,
    tiny_glm46v_config,
    tiny_glm_ocr_config,
    tiny_hyperclovax_vision_v2_config,
    tiny_kimi_k25_config,
    tiny_lfm3_vl_config,
    tiny_llava_onevision1_5_config,
    tiny_paddleocr_vl_config,
    tiny_patch_merger_vision_config,
    tiny_qwen2_5_vl_config,
    tiny_qwen2_vl_config,
    tiny_qwen3_vl_config,
    tiny_qwen3_vl_moe_config,
)
from .qomni import tiny_qwen3_omni_moe_config
from .runs import tiny_minicpm_ocr_config, tiny_minicpmv4_6_config, tiny_minicpmv4_7_config, tiny_step3p7_config
from .uocr import tiny_unlimited_ocr_config

# model_type -> builder, for every drop-in of the registry whose builder exists (`utils/check_exports.py` reports a
# drop-in without one).
TINY_CONFIG_BUILDERS: dict[str, Callable[[], PreTrainedConfig]] = {
    model_type: globals()[spec.tiny_config]
    for model_type, spec in sorted(FAMILY_SPECS.items())
    if spec.tiny_config is not None and spec.tiny_config in globals()
}


def tiny_config(model_type: str) -> PreTrainedConfig:
    """The tiny test config of a drop-in's model type (`"gemma3"`, `"qwen2_vl"`, ...), from its registry entry.

    Args:
        model_type (`str`): a model type with a drop-in (a key of `TINY_CONFIG_BUILDERS`).

    Returns:
        `PreTrainedConfig`: a fresh config, of that model type.

    Example:

    ```python
    >>> tiny_config("qwen2_vl").vision_config.spatial_merge_size
    2

    ```
    """
    if model_type not in TINY_CONFIG_BUILDERS:
        raise ValueError(f"No tiny config for model type {model_type!r}; known: {sorted(TINY_CONFIG_BUILDERS)}")
    return TINY_CONFIG_BUILDERS[model_type]()


__all__ = [
    "TINY_CONFIG_BUILDERS",
    "tiny_aria_config",
    "tiny_aya_vision_config",
    "tiny_blip_2_config",
    "tiny_instructblip_config",
    "tiny_instructblipvideo_config",
    "tiny_deepseek_ocr2_config",
    "tiny_gemma4_config",
    "tiny_qwen2_5_omni_config",
    "tiny_muse_spark_config",
    "tiny_apertus1p5_config",
    "tiny_dots3_note_config",
    "tiny_minicpm_ocr_config",
    "tiny_minicpmv4_6_config",
    "tiny_minicpmv4_7_config",
    "tiny_molmo2_config",
    "tiny_step3p7_config",
    "tiny_unlimited_ocr_config",
    "tiny_chameleon_config",
    "tiny_cohere2_vision_config",
    "tiny_config",
    "tiny_deepseek_vl_config",
    "tiny_deepseek_vl_hybrid_config",
    "tiny_emu3_config",
    "tiny_exaone4_5_config",
    "tiny_fuyu_config",
    "tiny_gemma3_config",
    "tiny_glm46v_config",
    "tiny_glm5_next_config",
    "tiny_ernie4_5_vl_moe_config",
    "tiny_cohere_compass_config",
    "tiny_kimi_k25_config",
    "tiny_cosmos3_edge_config",
    "tiny_cosmos3_omni_config",
    "tiny_paddleocr_vl_config",
    "tiny_glm_ocr_config",
    "tiny_glm4v_config",
    "tiny_glm4v_moe_config",
    "tiny_got_ocr2_config",
    "tiny_granite4_vision_config",
    "tiny_granite_docling_config",
    "tiny_hunyuan_vl_config",
    "tiny_hyperclovax_vision_v2_config",
    "tiny_inkling2_config",
    "tiny_inkling2_loop_config",
    "tiny_inkling_mm_model_config",
    "tiny_idefics2_config",
    "tiny_idefics_config",
    "tiny_idefics3_config",
    "tiny_internvl_config",
    "tiny_janus_config",
    "tiny_lfm2_vl_config",
    "tiny_lfm3_vl_config",
    "tiny_lighton_ocr_config",
    "tiny_llava_config",
    "tiny_llava_next_config",
    "tiny_llava_next_video_config",
    "tiny_llava_onevision_config",
    "tiny_llava_onevision1_5_config",
    "tiny_mistral3_config",
    "tiny_muse_glimmer_config",
    "tiny_nemotron_h_omni_config",
    "tiny_ovis2_5_config",
    "tiny_ovis2_config",
    "tiny_paligemma_config",
    "tiny_patch_merger_vision_config",
    "tiny_qianfan_ocr_config",
    "tiny_qwen2_5_vl_config",
    "tiny_qwen2_vl_config",
    "tiny_qwen3_5_config",
    "tiny_qwen3_5_moe_config",
    "tiny_qwen3_omni_moe_config",
    "tiny_qwen4_exp_config",
    "tiny_minimax_m3_vl_config",
    "tiny_hy_v4_vl_config",
    "tiny_mistral_large4_config",
    "tiny_qwen3_vl_config",
    "tiny_qwen3_vl_moe_config",
    "tiny_sam_vision_config",
    "tiny_smolvlm_config",
    "tiny_text_config",
    "tiny_video_llama_3_config",
    "tiny_video_llava_config",
    "tiny_vipllava_config",
    "tiny_vision_config",
]
