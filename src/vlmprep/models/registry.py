"""One table of what vlmprep states about every model type: its status, and its drop-in class, layout, text-only rule
and tiny test config, or what stands in the way of a drop-in today.

`FAMILY_SPECS` is keyed by model type (the `config_class.model_type` of the transformers class, which is how
`vlmprep.AutoModelForImageTextToText` picks a drop-in). Each spec has one status (`STATUSES`):

- **drop-in**: names its class (imported only when asked for), the layout it picks from
  `vlmprep.models.layouts.LAYOUTS` and the builder of its tiny test config (`vlmprep.testing.configs`);
- **alias**: a config type that transformers builds as another model type's class under its own name
  (`shieldgemma2` is `Gemma3ForConditionalGeneration`): it loads that model type's drop-in;
- **candidate**: image features fill runs of placeholder tokens through `mm_encoder_outputs`, as the spans expect;
  the reason says what the drop-in still needs;
- **not placeholder-based**: images do not reach an autoregressive `generate` through placeholder tokens
  (encoder-decoder, cross-attention, embeddings joined inside the forward, no token generation);
- **blocked upstream**: transformers itself stands in the way (a forward that fails, audio encoded inside every
  forward with no way to pass it encoded).

A reason says what stands in the way with transformers as it is now (the lowest supported version's source), not how
it came to be. Any spec may have a text-only rule (`vlmprep.models.text_only_rules`), which `vlmprep.loading.text_only`
applies. `utils/families_table.py` writes the table into docs/families.md and fails when an image-text-to-text model
type of transformers has no entry; `utils/check_exports.py` checks each drop-in against its module, class and layout.

Plain data: importing this module imports no model code.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from .layouts import LAYOUTS
from .text_only_rules import (
    COHERE2_VISION,
    LANGUAGE_MODEL,
    QWEN2_DECODER,
    QWEN3_DECODER,
    QWEN3_MOE_DECODER,
    TEXT_MODEL,
    TextOnlyFamily,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "ALIAS",
    "BLOCKED_UPSTREAM",
    "CANDIDATE",
    "DROP_IN",
    "FAMILY_SPECS",
    "NOT_ADAPTED_REASONS",
    "NOT_PLACEHOLDER_BASED",
    "STATUSES",
    "FamilySpec",
    "load_drop_in_classes",
]

DROP_IN = "drop-in"
ALIAS = "alias"
CANDIDATE = "candidate"
NOT_PLACEHOLDER_BASED = "not placeholder-based"
BLOCKED_UPSTREAM = "blocked upstream"
STATUSES = (DROP_IN, ALIAS, CANDIDATE, NOT_PLACEHOLDER_BASED, BLOCKED_UPSTREAM)


@dataclass(frozen=True)
class FamilySpec:
    """What vlmprep states about one model type.

    Args:
        status (`str`): one of `STATUSES`.
        drop_in (`str`, *optional*):
            `"<module>.<class>"` of the drop-in in `vlmprep.models` (imported only by `drop_in_class`); only for a
            drop-in.
        layout (`str`, *optional*): the drop-in's layout, a key of `vlmprep.models.layouts.LAYOUTS`.
        text_only (`TextOnlyFamily`, *optional*):
            how `vlmprep.AutoModelForCausalLM` takes the text decoder out of a checkpoint; `None` when it does not.
        alias_of (`str`, *optional*): for an alias, the model type whose drop-in it loads.
        reason (`str`, *optional*): for a candidate, a type not placeholder-based or one blocked upstream, what
            stands in the way of a drop-in today (one line).
        tiny_config (`str`, *optional*):
            the builder in `vlmprep.testing.configs` of the tiny test config (`"tiny_gemma3_config"`), which every
            drop-in has (`vlmprep.testing.tiny_config(model_type)` calls it).
    """

    status: str
    drop_in: str | None = None
    layout: str | None = None
    text_only: TextOnlyFamily | None = None
    alias_of: str | None = None
    reason: str | None = None
    tiny_config: str | None = None

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"A FamilySpec's status is one of {STATUSES}, got {self.status!r}.")
        is_drop_in = self.status == DROP_IN
        if is_drop_in != (self.drop_in is not None) or is_drop_in != (self.tiny_config is not None):
            raise ValueError("A drop-in (and only a drop-in) names its class and the builder of its tiny config.")
        if is_drop_in != (self.layout is not None) or (self.layout is not None and self.layout not in LAYOUTS):
            raise ValueError(f"A drop-in's layout is one of {sorted(LAYOUTS)}; any other status has none.")
        if (self.status == ALIAS) != (self.alias_of is not None):
            raise ValueError("An alias (and only an alias) names the model type whose drop-in it loads.")
        if (self.status in (DROP_IN, ALIAS)) == (self.reason is not None):
            raise ValueError("A type without a drop-in of its own or of another type says what stands in the way.")

    @property
    def module(self) -> str | None:
        """The drop-in's module name inside `vlmprep.models` (`"gemma3"`), or `None`."""
        return None if self.drop_in is None else self.drop_in.rsplit(".", 1)[0]

    @property
    def class_name(self) -> str | None:
        """The drop-in's class name, the transformers class's (`"Gemma3ForConditionalGeneration"`), or `None`."""
        return None if self.drop_in is None else self.drop_in.rsplit(".", 1)[1]

    def drop_in_class(self) -> type[PreTrainedModel]:
        """The drop-in class this model type loads (an alias's: its model type's), imported on first use."""
        if self.status == ALIAS:
            return FAMILY_SPECS[self.alias_of].drop_in_class()
        if self.drop_in is None:
            raise ValueError(f"This model type has no drop-in class ({self.status}): {self.reason}")
        return getattr(importlib.import_module(f"{__package__}.{self.module}"), self.class_name)


_PATCH_GRID = (
    "patch-grid inputs (flattened patches, `image_grid_thw`) with multimodal rope from the model's own "
    "`get_rope_index`, as qwen2_vl's: a `patch_grid` layout fits; the drop-in is not written yet"
)
_MROPE = "multimodal rope from the model's own `get_rope_index` (as qwen2_vl's)"
_AUDIO_IN_FORWARD = (
    "transformers' forward encodes audio from `input_features` on every call and takes no encoded audio "
    "(`mm_encoder_outputs` holds images and videos only), so audio cannot be encoded once"
)
_TIMM = "needs `timm`, which is not a vlmprep dependency, so the model cannot be built or tested here"
_HYBRID = "hybrid decoder (layers with a running state: the prefix cache is not used with it)"


def _drop_in(drop_in: str, layout: str, text_only: TextOnlyFamily | None = None) -> FamilySpec:
    # A drop-in's tiny test config is built by `tiny_<module>_config` of `vlmprep.testing.configs`.
    tiny_config = f"tiny_{drop_in.rsplit('.', 1)[0]}_config"
    return FamilySpec(DROP_IN, drop_in=drop_in, layout=layout, text_only=text_only, tiny_config=tiny_config)


def _alias(model_type: str) -> FamilySpec:
    return FamilySpec(ALIAS, alias_of=model_type)


def _candidate(reason: str, text_only: TextOnlyFamily | None = None) -> FamilySpec:
    return FamilySpec(CANDIDATE, reason=reason, text_only=text_only)


def _not_placeholder_based(reason: str) -> FamilySpec:
    return FamilySpec(NOT_PLACEHOLDER_BASED, reason=reason)


def _blocked_upstream(reason: str) -> FamilySpec:
    return FamilySpec(BLOCKED_UPSTREAM, reason=reason)


# model_type -> spec. Every model type of transformers' image-text-to-text mapping has an entry, and so does every
# other type with a text-only rule.
FAMILY_SPECS: Mapping[str, FamilySpec] = MappingProxyType(
    {
        "apertus1p5": _blocked_upstream(
            f"{_AUDIO_IN_FORWARD}; its images (discrete vision-tokenizer tokens, one run per row split by end-of-line "
            "tokens) would fit the spans"
        ),
        "aria": _drop_in("aria.AriaForConditionalGeneration", "projector_crops"),
        "aya_vision": _drop_in("aya_vision.AyaVisionForConditionalGeneration", "pixel_shuffled_tiles", COHERE2_VISION),
        "blip": _not_placeholder_based(
            "own `generate`: the BERT text decoder cross-attends to the image embeddings; no image placeholders"
        ),
        "blip-2": _candidate(
            "decoder-only checkpoints: the Q-Former's `num_query_tokens` outputs fill one run of image placeholders "
            "through `mm_encoder_outputs`; not written yet (Flan-T5 checkpoints are encoder-decoder)"
        ),
        "chameleon": _candidate("a VQ-VAE turns each image into `image_seq_length` vocabulary tokens"),
        "cohere2_vision": _drop_in(
            "cohere2_vision.Cohere2VisionForConditionalGeneration", "pixel_shuffled_tiles", COHERE2_VISION
        ),
        "cohere_compass": _candidate(f"{_PATCH_GRID} (deepstack features as qwen3_vl's: `patch_grid_per_frame`)"),
        "cosmos3_edge": _candidate(_PATCH_GRID),
        "cosmos3_omni": _blocked_upstream(f"{_AUDIO_IN_FORWARD}; its images are Qwen3-VL's (`patch_grid_per_frame`)"),
        "deepseek_ocr2": _candidate(
            "one run per image covering its global view, its `num_local_patches` crops (`pixel_values_local`) and a "
            "separator: a layout of its own"
        ),
        "deepseek_vl": _drop_in("deepseek_vl.DeepseekVLForConditionalGeneration", "vision_patches", LANGUAGE_MODEL),
        "deepseek_vl_hybrid": _drop_in(
            "deepseek_vl_hybrid.DeepseekVLHybridForConditionalGeneration", "vision_patches"
        ),
        "diffusion_gemma": _not_placeholder_based(
            "block-diffusion model: its own generation mixin denoises blocks of tokens, not the autoregressive loop "
            "whose hooks vlmprep overrides"
        ),
        "dots3_note": _blocked_upstream(_AUDIO_IN_FORWARD),
        "emu3": _candidate("VQ-VAE image tokens, `height * (width + 1)` placeholders per image from `image_sizes`"),
        "ernie4_5_vl_moe": _candidate(
            f"{_PATCH_GRID}; its `moe_mm_token_type_ids` (modality-routed MoE) are already part of the prefix keys"
        ),
        "evolla": _not_placeholder_based(
            "protein-text model: a SaProt protein encoder feeds the decoder through cross-attention; no placeholders"
        ),
        "exaone4_5": _drop_in("exaone4_5.Exaone4_5_ForConditionalGeneration", "patch_grid_text_positions"),
        "fast_vlm": _candidate(f"one placeholder run per image, but the vision tower is timm's FastViT: {_TIMM}"),
        "florence2": _not_placeholder_based(
            "encoder-decoder (BART): image features join the prompt in the encoder; the decoder cross-attends"
        ),
        "fuyu": _candidate(
            "no vision tower to run once (one linear layer embeds the patches, read as `last_hidden_state`); an "
            "image's placeholders are split into rows by `|NEWLINE|` tokens"
        ),
        "gemma3": _drop_in("gemma3.Gemma3ForConditionalGeneration", "fixed_image", LANGUAGE_MODEL),
        "gemma3n": _blocked_upstream(f"{_AUDIO_IN_FORWARD}; also its vision tower is timm's MobileNetV5: {_TIMM}"),
        "gemma4": _blocked_upstream(
            f"{_AUDIO_IN_FORWARD}; its images (soft tokens from `image_position_ids`, bidirectional on sliding "
            'layers when `use_bidirectional_attention="vision"`) go through `mm_encoder_outputs`'
        ),
        "gemma4_unified": _not_placeholder_based(
            "encoder-free: images and audio are embedded inside the forward, there is no vision tower to run once"
        ),
        "git": _not_placeholder_based(
            "image embeddings are concatenated in front of the text inside the forward; no placeholder tokens"
        ),
        "glm46v": _drop_in("glm46v.Glm46VForConditionalGeneration", "patch_grid_per_frame"),
        "glm4v": _drop_in("glm4v.Glm4vForConditionalGeneration", "patch_grid_per_frame"),
        "glm4v_moe": _drop_in("glm4v_moe.Glm4vMoeForConditionalGeneration", "patch_grid_per_frame"),
        "glm5_next": _candidate(f"flattened patches + `image_grid_thw`, 1D positions; {_HYBRID}"),
        "glm_ocr": _candidate(_PATCH_GRID),
        "glmga": _alias("glm46v"),
        "got_ocr2": _drop_in("got_ocr2.GotOcr2ForConditionalGeneration", "tiles", LANGUAGE_MODEL),
        "granite4_vision": _candidate(
            "deepstack features come as `(decoder layer, packed features)` pairs summed in at those layers "
            "(placeholders zeroed), a container the per-chunk rows (Qwen3-VL's per-layer list) do not read yet"
        ),
        "granite_docling": _candidate(
            "an image is several runs (one per tile behind `<row_i_col_j>`, then the global image, as idefics3's "
            "sub-images), with deepstack features: not written yet"
        ),
        "hunyuan_vl": _candidate(_PATCH_GRID),
        "hy_v4_vl": _candidate(f"{_PATCH_GRID}; indexed-attention decoder"),
        "hyperclovax_vision_v2": _drop_in(
            "hyperclovax_vision_v2.HyperCLOVAXVisionV2ForConditionalGeneration", "patch_grid_text_positions"
        ),
        "idefics": _not_placeholder_based(
            "Flamingo-style: gated cross-attention layers read the image states; no placeholder tokens"
        ),
        "idefics2": _candidate(
            "each crop is one 64-token perceiver run between `<fake_token_around_image>` tokens", TEXT_MODEL
        ),
        "idefics3": _drop_in("idefics3.Idefics3ForConditionalGeneration", "sub_images", TEXT_MODEL),
        "inkling2": _candidate(f"flattened patches + `image_grid_thw`, 1D positions; {_HYBRID}"),
        "inkling2_loop": _candidate(f"flattened patches + `image_grid_thw`, 1D positions; {_HYBRID}"),
        "inkling_mm_model": _blocked_upstream(_AUDIO_IN_FORWARD),
        "instructblip": _candidate(
            "the Q-Former reads `qformer_input_ids` (the prompt's text), so an image's features depend on the "
            "prompt: the encoder-cache and prefix keys would need that text; then one run of query placeholders"
        ),
        "instructblipvideo": _candidate(
            "the Q-Former reads `qformer_input_ids` (the prompt's text), so a video's features depend on the "
            "prompt: the encoder-cache and prefix keys would need that text; then one run of query placeholders"
        ),
        "internvl": _drop_in("internvl.InternVLForConditionalGeneration", "tiles", LANGUAGE_MODEL),
        "janus": _candidate(
            "fixed `num_image_tokens` between start/end tokens; its `generate` delegates text mode to transformers'"
        ),
        "kimi_k25": _candidate("flattened patches + `image_grid_thw`, 1D positions"),
        "kosmos-2": _not_placeholder_based(
            "own `generate`: image features are placed by `image_embeds_position_mask`, not `mm_encoder_outputs`"
        ),
        "kosmos-2.5": _not_placeholder_based(
            "image features from `flattened_patches` are placed by `image_embeds_position_mask` inside the forward, "
            "not through `mm_encoder_outputs`"
        ),
        "lfm2_vl": _drop_in("lfm2_vl.Lfm2VlForConditionalGeneration", "naflex_tiles", LANGUAGE_MODEL),
        "lfm3_vl": _drop_in("lfm3_vl.Lfm3VlForConditionalGeneration", "patch_grid_per_frame_text_positions"),
        "lighton_ocr": _drop_in("lighton_ocr.LightOnOcrForConditionalGeneration", "pixtral_image", LANGUAGE_MODEL),
        "llama4": _blocked_upstream(
            "transformers' `Llama4ForConditionalGeneration.forward` fails on every call (it reads `image_outputs` "
            "from the causal-LM output: AttributeError), so there is no upstream model to be exact against; tiles "
            "would fit the spans (one contiguous `<|patch|>` run and one `pixel_values` row each)"
        ),
        "llava": _drop_in("llava.LlavaForConditionalGeneration", "vision_patches", LANGUAGE_MODEL),
        "llava_next": _drop_in("llava_next.LlavaNextForConditionalGeneration", "anyres_crops", LANGUAGE_MODEL),
        "llava_next_video": _drop_in(
            "llava_next_video.LlavaNextVideoForConditionalGeneration", "anyres_crops", LANGUAGE_MODEL
        ),
        "llava_onevision": _drop_in(
            "llava_onevision.LlavaOnevisionForConditionalGeneration", "anyres_crops_per_sample", LANGUAGE_MODEL
        ),
        "minicpm_ocr": _candidate(
            "an image is several runs (global view, then one run per slice between slice start/end tokens), each "
            f"with its own token count: a layout of its own; {_HYBRID}"
        ),
        "minicpmv4_6": _candidate(
            "an image is several runs (global view, then one run per slice between slice start/end tokens), each "
            f"with its own token count: a layout of its own; {_HYBRID}"
        ),
        "minicpmv4_7": _candidate(f"an image is several runs (global view, then one per slice); {_MROPE}"),
        "minimax_m3_vl": _candidate(
            "flattened patches + `image_grid_thw` between vision start/end tokens, 1D positions"
        ),
        "mistral3": _drop_in("mistral3.Mistral3ForConditionalGeneration", "pixtral_rows", LANGUAGE_MODEL),
        "mistral4": _not_placeholder_based("text-only decoder (`Mistral4ForCausalLM`): no image inputs to prepare"),
        "mistral_large4": _candidate(
            "Pixtral rows (the `pixtral_rows` layout fits), with an indexed-attention MoE decoder; not written yet"
        ),
        "mllama": _not_placeholder_based(
            "cross-attention layers read the image states (`cross_attention_states`); no placeholder tokens"
        ),
        "molmo2": _candidate(
            "features are pooled per placeholder from `image_token_pooling` indices, and an image is a low-res and a"
            " high-res part with `<im_col>` tokens between rows: a layout of its own"
        ),
        "muse_glimmer": _drop_in(
            "muse_glimmer.MuseGlimmerForConditionalGeneration", "patch_grid_per_frame_text_positions"
        ),
        "muse_spark": _blocked_upstream(_AUDIO_IN_FORWARD),
        "nemotron_h_omni": _blocked_upstream(f"{_AUDIO_IN_FORWARD}; {_HYBRID}"),
        "ovis2": _candidate(
            "the model also reads `visual_indicator_features` from `mm_encoder_outputs` (image indicator tokens get "
            "vision embeddings), and a tiled image is several runs split by `<IMG_COL>`/`<IMG_ROW>`"
        ),
        "paddleocr_vl": _candidate(_PATCH_GRID),
        "paligemma": _drop_in("paligemma.PaliGemmaForConditionalGeneration", "fixed_image", LANGUAGE_MODEL),
        "perception_lm": _candidate(f"the vision tower is a timm Perception Encoder: {_TIMM}"),
        "pi0": _not_placeholder_based(
            "vision-language-action policy: `sample_actions` denoises continuous actions; not a `GenerationMixin` "
            "model"
        ),
        "pix2struct": _not_placeholder_based(
            "encoder-decoder over `flattened_patches` (the prompt is rendered into the image); the decoder cross-"
            "attends"
        ),
        "pp_chart2table": _alias("got_ocr2"),
        "pp_formulanet": _not_placeholder_based(
            "encoder-decoder: the image is the encoder input and the decoder cross-attends; no placeholders"
        ),
        "qianfan_ocr": _drop_in("qianfan_ocr.QianfanOCRForConditionalGeneration", "tiles"),
        "qwen2_5_omni_thinker": _blocked_upstream(
            f"{_AUDIO_IN_FORWARD}; its images and videos use {_MROPE}, interleaved with audio"
        ),
        "qwen2_5_vl": _drop_in("qwen2_5_vl.Qwen2_5_VLForConditionalGeneration", "patch_grid", QWEN2_DECODER),
        "qwen2_vl": _drop_in("qwen2_vl.Qwen2VLForConditionalGeneration", "patch_grid", QWEN2_DECODER),
        "qwen3_5": _candidate(f"{_PATCH_GRID}; Gated-DeltaNet {_HYBRID}"),
        "qwen3_5_moe": _candidate(f"{_PATCH_GRID}; Gated-DeltaNet {_HYBRID}"),
        "qwen3_omni_moe_thinker": _blocked_upstream(
            f"{_AUDIO_IN_FORWARD}; its images and videos are Qwen3-VL's (multimodal rope, deepstack)"
        ),
        "qwen3_vl": _drop_in("qwen3_vl.Qwen3VLForConditionalGeneration", "patch_grid_per_frame", QWEN3_DECODER),
        "qwen3_vl_moe": _drop_in(
            "qwen3_vl_moe.Qwen3VLMoeForConditionalGeneration", "patch_grid_per_frame", QWEN3_MOE_DECODER
        ),
        "qwen4_exp": _candidate(f"{_PATCH_GRID}; Gated-DeltaNet {_HYBRID}"),
        "shieldgemma2": _alias("gemma3"),
        "smolvlm": _drop_in("smolvlm.SmolVLMForConditionalGeneration", "sub_images", TEXT_MODEL),
        "step3p7": _candidate(
            "an image is several runs (one per local crop between `<patch_start>`/`<patch_end>`, then the global "
            "view) from two pixel inputs (`pixel_values`, `pixel_values_local`): a layout of its own"
        ),
        "t5gemma2": _not_placeholder_based(
            "encoder-decoder: image placeholders are in the encoder's input; the decoder cross-attends"
        ),
        "udop": _not_placeholder_based(
            "encoder-decoder (T5) over text, layout boxes and image patches; the decoder cross-attends"
        ),
        "unlimited_ocr": _candidate(
            "its own `_prefill` (a reference sliding-window cache that pins the prefill region) is the hook the "
            "vlmprep mixin replaces; the two need merging"
        ),
        "video_llama_3": _candidate("flattened patches + `image_grid_thw` and `image_merge_sizes`, 1D positions"),
        "video_llava": _drop_in("video_llava.VideoLlavaForConditionalGeneration", "vision_patches", LANGUAGE_MODEL),
        "vipllava": _drop_in("vipllava.VipLlavaForConditionalGeneration", "vision_patches", LANGUAGE_MODEL),
        "vision-encoder-decoder": _not_placeholder_based(
            "encoder-decoder: the image is the encoder input (no prompt placeholders); the decoder cross-attends"
        ),
    }
)

# model_type -> what stands in the way of a drop-in, for every type that loads none (a view of `FAMILY_SPECS`).
NOT_ADAPTED_REASONS: Mapping[str, str] = MappingProxyType(
    {model_type: spec.reason for model_type, spec in FAMILY_SPECS.items() if spec.reason is not None}
)


def load_drop_in_classes() -> dict[str, type[PreTrainedModel]]:
    """model_type -> drop-in class, for every drop-in and every alias of one (this imports every family module).

    Returns:
        `dict[str, type[PreTrainedModel]]`, sorted by model type.
    """
    return {
        model_type: spec.drop_in_class()
        for model_type, spec in FAMILY_SPECS.items()
        if spec.status in (DROP_IN, ALIAS)
    }
