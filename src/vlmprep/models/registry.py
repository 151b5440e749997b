"""One table of what vlmprep states about every model type: drop-in class, layout, text-only rule, tiny test config, or
why not adapted.

`FAMILY_SPECS` is keyed by model type (the `config_class.model_type` of the transformers class, which is how
`vlmprep.AutoModelForImageTextToText` picks a drop-in). A model type with a drop-in names its class (imported only when
asked for), the layout it picks from `vlmprep.models.layouts.LAYOUTS` and the builder of its tiny test config
(`vlmprep.testing.configs`); one without a drop-in says why not.
Either may have a text-only rule (`vlmprep.models.text_only_rules`), which `vlmprep.loading.text_only` applies.
`utils/families_table.py` writes the table into docs/families.md and fails when an image-text-to-text model type of
transformers has no entry; `utils/check_exports.py` checks each drop-in against its module, class and layout.

Not-adapted reasons come in a few kinds:

- **candidate**: "not yet adapted (placeholder-based: candidate; ...)": image features fill a run of placeholder tokens
  per image (or per crop) through `mm_encoder_outputs`, as the span mechanism expects; the drop-in has not been
  written and tested yet;
- **needs more than spans**: multimodal rope, deepstack features, several placeholder runs per image, audio encoded
  inside the forward, a generation loop of its own: the mechanism needs an extension first;
- **does not fit**: encoder-decoder models, cross-attention to the image, no placeholder tokens, no token generation,
  or a vision tower that needs `timm` (not a vlmprep dependency, so the model cannot even be built here).

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

__all__ = ["CANDIDATE", "FAMILY_SPECS", "NOT_ADAPTED_REASONS", "FamilySpec", "load_drop_in_classes"]


@dataclass(frozen=True)
class FamilySpec:
    """What vlmprep states about one model type.

    Args:
        drop_in (`str`, *optional*):
            `"<module>.<class>"` of the drop-in in `vlmprep.models` (imported only by `drop_in_class`); `None` when
            the model type loads as transformers' own class.
        layout (`str`, *optional*): the drop-in's layout, a key of `vlmprep.models.layouts.LAYOUTS`.
        text_only (`TextOnlyFamily`, *optional*):
            how `vlmprep.AutoModelForCausalLM` takes the text decoder out of a checkpoint; `None` when it does not.
        not_adapted (`str`, *optional*): for a model type without a drop-in, why (one line).
        tiny_config (`str`, *optional*):
            the builder in `vlmprep.testing.configs` of the tiny test config (`"tiny_gemma3_config"`), which every
            drop-in has (`vlmprep.testing.tiny_config(model_type)` calls it); `None` without a drop-in.
    """

    drop_in: str | None = None
    layout: str | None = None
    text_only: TextOnlyFamily | None = None
    not_adapted: str | None = None
    tiny_config: str | None = None

    def __post_init__(self):
        if (self.drop_in is None) == (self.not_adapted is None):
            raise ValueError("A FamilySpec names either its drop-in class or the reason it has none, not both.")
        if (self.drop_in is None) != (self.layout is None) or (self.layout is not None and self.layout not in LAYOUTS):
            raise ValueError(f"A drop-in's layout is one of {sorted(LAYOUTS)}; a type without a drop-in has none.")
        if (self.drop_in is None) != (self.tiny_config is None):
            raise ValueError("A drop-in names the builder of its tiny test config; a type without a drop-in has none.")

    @property
    def module(self) -> str | None:
        """The drop-in's module name inside `vlmprep.models` (`"gemma3"`), or `None`."""
        return None if self.drop_in is None else self.drop_in.rsplit(".", 1)[0]

    @property
    def class_name(self) -> str | None:
        """The drop-in's class name, the transformers class's (`"Gemma3ForConditionalGeneration"`), or `None`."""
        return None if self.drop_in is None else self.drop_in.rsplit(".", 1)[1]

    def drop_in_class(self) -> type[PreTrainedModel]:
        """The drop-in class, its family module imported on first use."""
        if self.drop_in is None:
            raise ValueError(f"This model type has no drop-in class: {self.not_adapted}")
        return getattr(importlib.import_module(f"{__package__}.{self.module}"), self.class_name)


# The reason of a placeholder-based family whose drop-in has not been written yet; specifics follow after a ";".
CANDIDATE = "not yet adapted (placeholder-based: candidate)"

_MROPE = "multimodal rope (3D positions from `image_grid_thw`, `get_rope_index`)"
_DEEPSTACK = (
    "deepstack features (`deepstack_features` added at early decoder layers; carried by the mixin since qwen3_vl)"
)
_AUDIO_IN_FORWARD = "audio is encoded inside every forward, outside `mm_encoder_outputs` (vlmprep has no audio spans)"
_PIXTRAL_ROWS = (
    "Pixtral layout: an image's `[IMG]` placeholders are one run per patch row, split by `[IMG_BREAK]` (handled as "
    "several runs per image since mistral3)"
)
_TIMM = "needs `timm`, which is not a vlmprep dependency, so the model cannot be built here"


_PATCH_GRID_READY = "the patch-grid layout exists (`layouts.patch_grid`), this drop-in is not written yet"


def _candidate(details: str) -> str:
    return f"{CANDIDATE[:-1]}; {details})"


def _drop_in(drop_in: str, layout: str, text_only: TextOnlyFamily | None = None) -> FamilySpec:
    # A drop-in's tiny test config is built by `tiny_<module>_config` of `vlmprep.testing.configs`.
    tiny_config = f"tiny_{drop_in.rsplit('.', 1)[0]}_config"
    return FamilySpec(drop_in=drop_in, layout=layout, text_only=text_only, tiny_config=tiny_config)


def _not_adapted(reason: str, text_only: TextOnlyFamily | None = None) -> FamilySpec:
    return FamilySpec(not_adapted=reason, text_only=text_only)


# model_type -> spec. Every model type of transformers' image-text-to-text mapping has an entry (a family whose drop-in
# lands replaces its reason by its class), and so does every other type with a text-only rule.
FAMILY_SPECS: Mapping[str, FamilySpec] = MappingProxyType(
    {
        "apertus1p5": _not_adapted(
            "image placeholders are one run per row, split by end-of-line tokens (discrete vision tokenizer); "
            f"{_AUDIO_IN_FORWARD}"
        ),
        "aria": _drop_in("aria.AriaForConditionalGeneration", "projector_crops"),
        "aya_vision": _drop_in("aya_vision.AyaVisionForConditionalGeneration", "pixel_shuffled_tiles", COHERE2_VISION),
        "blip": _not_adapted(
            "own `generate`: the BERT text decoder cross-attends to the image embeddings; no image placeholders"
        ),
        "blip-2": _not_adapted(
            "own `generate` runs the vision tower and Q-Former, then the language model's `generate` with "
            "`inputs_embeds` (Flan-T5 checkpoints are encoder-decoder)"
        ),
        "chameleon": _not_adapted(_candidate("a VQ-VAE turns each image into `image_seq_length` vocabulary tokens")),
        "cohere2_vision": _drop_in(
            "cohere2_vision.Cohere2VisionForConditionalGeneration", "pixel_shuffled_tiles", COHERE2_VISION
        ),
        "cohere_compass": _not_adapted(f"{_MROPE} and {_DEEPSTACK}; {_PATCH_GRID_READY}"),
        "cosmos3_edge": _not_adapted(f"{_MROPE}; {_PATCH_GRID_READY}"),
        "cosmos3_omni": _not_adapted(f"Qwen3-VL-based: {_MROPE} and {_DEEPSTACK}"),
        "deepseek_ocr2": _not_adapted(
            _candidate(
                "one run per image covering its global view, its `num_local_patches` crops (`pixel_values_local`) "
                "and a separator"
            )
        ),
        "deepseek_vl": _drop_in("deepseek_vl.DeepseekVLForConditionalGeneration", "vision_patches", LANGUAGE_MODEL),
        "deepseek_vl_hybrid": _drop_in(
            "deepseek_vl_hybrid.DeepseekVLHybridForConditionalGeneration", "vision_patches"
        ),
        "diffusion_gemma": _not_adapted(
            "block-diffusion model: its own generation mixin denoises blocks of tokens, not the autoregressive loop "
            "whose hooks vlmprep overrides"
        ),
        "dots3_note": _not_adapted(f"omni model: {_AUDIO_IN_FORWARD}"),
        "emu3": _not_adapted(
            _candidate("VQ-VAE image tokens, `height * (width + 1)` placeholders per image from `image_sizes`")
        ),
        "ernie4_5_vl_moe": _not_adapted(f"{_MROPE} and modality-routed MoE (`moe_mm_token_type_ids`)"),
        "evolla": _not_adapted(
            "protein-text model: a SaProt protein encoder feeds the decoder through cross-attention; no placeholders"
        ),
        "exaone4_5": _drop_in("exaone4_5.Exaone4_5_ForConditionalGeneration", "patch_grid_text_positions"),
        "fast_vlm": _not_adapted(f"vision tower is a timm FastViT (`TimmWrapperModel`): {_TIMM}"),
        "florence2": _not_adapted(
            "encoder-decoder (BART): image features join the prompt in the encoder; the decoder cross-attends"
        ),
        "fuyu": _not_adapted(
            "no vision tower (patches embedded by one linear layer, read as `last_hidden_state`); an image's "
            "placeholders are split into rows by `|NEWLINE|` tokens"
        ),
        "gemma3": _drop_in("gemma3.Gemma3ForConditionalGeneration", "fixed_image", LANGUAGE_MODEL),
        "gemma3n": _not_adapted(
            f"vision tower is timm's MobileNetV5 (`TimmWrapperModel`): {_TIMM}; also {_AUDIO_IN_FORWARD}"
        ),
        "gemma4": _not_adapted(
            f"{_AUDIO_IN_FORWARD}; images (soft tokens from `image_position_ids`, bidirectional on sliding layers "
            'when `use_bidirectional_attention="vision"`) not yet adapted'
        ),
        "gemma4_unified": _not_adapted(
            "encoder-free: images and audio are embedded inside the forward, there is no vision tower to run once"
        ),
        "git": _not_adapted(
            "image embeddings are concatenated in front of the text inside the forward; no placeholder tokens"
        ),
        "glm46v": _drop_in("glm46v.Glm46VForConditionalGeneration", "patch_grid_per_frame"),
        "glm4v": _drop_in("glm4v.Glm4vForConditionalGeneration", "patch_grid_per_frame"),
        "glm4v_moe": _drop_in("glm4v_moe.Glm4vMoeForConditionalGeneration", "patch_grid_per_frame"),
        "glm5_next": _not_adapted(
            _candidate("flattened patches + `image_grid_thw`, 1D positions; hybrid linear-attention decoder")
        ),
        "glm_ocr": _not_adapted(f"{_MROPE}; {_PATCH_GRID_READY}"),
        "glmga": _not_adapted(f"`Glm46VForConditionalGeneration` under its own config type; {_MROPE}"),
        "got_ocr2": _drop_in("got_ocr2.GotOcr2ForConditionalGeneration", "tiles", LANGUAGE_MODEL),
        "granite4_vision": _not_adapted(
            "image features enter by deepstack injection at several decoder layers (placeholders zeroed, "
            "`deepstack_features` summed in), which the mixin does not slice per chunk"
        ),
        "granite_docling": _not_adapted(
            "an image is several runs (one per tile behind `<row_i_col_j>`, then the global image) and features also"
            f" enter as {_DEEPSTACK}"
        ),
        "hunyuan_vl": _not_adapted(f"{_MROPE}; {_PATCH_GRID_READY}"),
        "hy_v4_vl": _not_adapted(f"{_MROPE}, with an indexed-attention decoder"),
        "hyperclovax_vision_v2": _drop_in(
            "hyperclovax_vision_v2.HyperCLOVAXVisionV2ForConditionalGeneration", "patch_grid_text_positions"
        ),
        "idefics": _not_adapted(
            "Flamingo-style: gated cross-attention layers read the image states; no placeholder tokens"
        ),
        "idefics2": _not_adapted(
            _candidate("each crop is one 64-token perceiver run between `<fake_token_around_image>` tokens"),
            TEXT_MODEL,
        ),
        "idefics3": _drop_in("idefics3.Idefics3ForConditionalGeneration", "sub_images", TEXT_MODEL),
        "inkling2": _not_adapted(
            _candidate("flattened patches + `image_grid_thw`, 1D positions; hybrid linear-attention decoder")
        ),
        "inkling2_loop": _not_adapted(
            _candidate("flattened patches + `image_grid_thw`, 1D positions; hybrid linear-attention decoder")
        ),
        "inkling_mm_model": _not_adapted(f"omni model: {_AUDIO_IN_FORWARD}"),
        "instructblip": _not_adapted(
            "own `generate` runs the vision tower and Q-Former (conditioned on `qformer_input_ids`), then the "
            "language model's `generate` with `inputs_embeds`"
        ),
        "instructblipvideo": _not_adapted(
            "own `generate` runs the frames through the Q-Former, then the language model's `generate` with "
            "`inputs_embeds`"
        ),
        "internvl": _drop_in("internvl.InternVLForConditionalGeneration", "tiles", LANGUAGE_MODEL),
        "janus": _not_adapted(
            _candidate(
                "fixed `num_image_tokens` between start/end tokens; its `generate` delegates text mode to "
                "transformers'"
            )
        ),
        "kimi_k25": _not_adapted(_candidate("flattened patches + `image_grid_thw`, 1D positions")),
        "kosmos-2": _not_adapted(
            "own `generate`: image features are placed by `image_embeds_position_mask`, not `mm_encoder_outputs`"
        ),
        "kosmos-2.5": _not_adapted(
            "image features from `flattened_patches` are placed by `image_embeds_position_mask` inside the forward, "
            "not through `mm_encoder_outputs`"
        ),
        "lfm2_vl": _drop_in("lfm2_vl.Lfm2VlForConditionalGeneration", "naflex_tiles", LANGUAGE_MODEL),
        "lfm3_vl": _drop_in("lfm3_vl.Lfm3VlForConditionalGeneration", "patch_grid_per_frame_text_positions"),
        "lighton_ocr": _drop_in("lighton_ocr.LightOnOcrForConditionalGeneration", "pixtral_image", LANGUAGE_MODEL),
        "llama4": _not_adapted(
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
        "minicpm_ocr": _not_adapted(
            "an image is several runs (global view, then one run per slice between slice start/end tokens), each "
            "with its own token count; Qwen3.5 hybrid decoder"
        ),
        "minicpmv4_6": _not_adapted(
            "an image is several runs (global view, then one run per slice between slice start/end tokens), each "
            "with its own token count; Qwen3.5 hybrid decoder"
        ),
        "minicpmv4_7": _not_adapted(f"an image is several runs (global view, then one per slice); {_MROPE}"),
        "minimax_m3_vl": _not_adapted(
            _candidate("flattened patches + `image_grid_thw` between vision start/end tokens, 1D positions")
        ),
        "mistral3": _drop_in("mistral3.Mistral3ForConditionalGeneration", "pixtral_rows", LANGUAGE_MODEL),
        "mistral4": _not_adapted("text-only decoder (`Mistral4ForCausalLM`): no image inputs to prepare"),
        "mistral_large4": _not_adapted(
            f"{_PIXTRAL_ROWS} (as in mistral3), with an indexed-attention MoE decoder: not yet adapted"
        ),
        "mllama": _not_adapted(
            "cross-attention layers read the image states (`cross_attention_states`); no placeholder tokens"
        ),
        "molmo2": _not_adapted(
            "features are pooled per placeholder from `image_token_pooling` indices, and an image is a low-res and a"
            " high-res part with `<im_col>` tokens between rows"
        ),
        "muse_glimmer": _drop_in(
            "muse_glimmer.MuseGlimmerForConditionalGeneration", "patch_grid_per_frame_text_positions"
        ),
        "muse_spark": _not_adapted(f"omni model: {_AUDIO_IN_FORWARD}"),
        "nemotron_h_omni": _not_adapted(f"omni model: {_AUDIO_IN_FORWARD}; hybrid Mamba decoder"),
        "ovis2": _not_adapted(
            "the model also reads `visual_indicator_features` from `mm_encoder_outputs` (image indicator tokens get "
            "vision embeddings), and a tiled image is several runs split by `<IMG_COL>`/`<IMG_ROW>`"
        ),
        "paddleocr_vl": _not_adapted(f"{_MROPE}; {_PATCH_GRID_READY}"),
        "paligemma": _drop_in("paligemma.PaliGemmaForConditionalGeneration", "fixed_image", LANGUAGE_MODEL),
        "perception_lm": _not_adapted(f"vision tower is a timm Perception Encoder (`TimmWrapperModel`): {_TIMM}"),
        "pi0": _not_adapted(
            "vision-language-action policy: `sample_actions` denoises continuous actions; not a `GenerationMixin` "
            "model"
        ),
        "pix2struct": _not_adapted(
            "encoder-decoder over `flattened_patches` (the prompt is rendered into the image); the decoder cross-"
            "attends"
        ),
        "pp_chart2table": _not_adapted(
            "`GotOcr2ForConditionalGeneration` under its own config type; drop-ins are registered by "
            "`config_class.model_type`, so this type loads transformers' class"
        ),
        "pp_formulanet": _not_adapted(
            "encoder-decoder: the image is the encoder input and the decoder cross-attends; no placeholders"
        ),
        "qianfan_ocr": _drop_in("qianfan_ocr.QianfanOCRForConditionalGeneration", "tiles"),
        "qwen2_5_omni_thinker": _not_adapted(
            f"omni model: {_AUDIO_IN_FORWARD}; {_MROPE} with audio-video interleaving"
        ),
        "qwen2_5_vl": _drop_in("qwen2_5_vl.Qwen2_5_VLForConditionalGeneration", "patch_grid", QWEN2_DECODER),
        "qwen2_vl": _drop_in("qwen2_vl.Qwen2VLForConditionalGeneration", "patch_grid", QWEN2_DECODER),
        "qwen3_5": _not_adapted(f"{_MROPE}, with a hybrid Gated-DeltaNet decoder: not yet adapted"),
        "qwen3_5_moe": _not_adapted(f"{_MROPE}, with a hybrid Gated-DeltaNet decoder: not yet adapted"),
        "qwen3_omni_moe_thinker": _not_adapted(f"omni model: {_AUDIO_IN_FORWARD}; {_MROPE} and deepstack features"),
        "qwen3_vl": _drop_in("qwen3_vl.Qwen3VLForConditionalGeneration", "patch_grid_per_frame", QWEN3_DECODER),
        "qwen3_vl_moe": _drop_in(
            "qwen3_vl_moe.Qwen3VLMoeForConditionalGeneration", "patch_grid_per_frame", QWEN3_MOE_DECODER
        ),
        "qwen4_exp": _not_adapted(f"{_MROPE}, with a hybrid Gated-DeltaNet decoder: not yet adapted"),
        "shieldgemma2": _not_adapted(
            "`Gemma3ForConditionalGeneration` under its own config type; drop-ins are registered by "
            "`config_class.model_type` (`gemma3`), so this type loads transformers' class"
        ),
        "smolvlm": _drop_in("smolvlm.SmolVLMForConditionalGeneration", "sub_images", TEXT_MODEL),
        "step3p7": _not_adapted(
            "an image is several runs (one per local crop between `<patch_start>`/`<patch_end>`, then the global "
            "view) from two pixel inputs (`pixel_values`, `pixel_values_local`)"
        ),
        "t5gemma2": _not_adapted(
            "encoder-decoder: image placeholders are in the encoder's input; the decoder cross-attends"
        ),
        "udop": _not_adapted(
            "encoder-decoder (T5) over text, layout boxes and image patches; the decoder cross-attends"
        ),
        "unlimited_ocr": _not_adapted(
            "its own `_prefill` (a reference sliding-window cache that pins the prefill region) is the hook the "
            "vlmprep mixin replaces; the two need merging"
        ),
        "video_llama_3": _not_adapted(
            _candidate("flattened patches + `image_grid_thw` and `image_merge_sizes`, 1D positions")
        ),
        "video_llava": _drop_in("video_llava.VideoLlavaForConditionalGeneration", "vision_patches", LANGUAGE_MODEL),
        "vipllava": _drop_in("vipllava.VipLlavaForConditionalGeneration", "vision_patches", LANGUAGE_MODEL),
        "vision-encoder-decoder": _not_adapted(
            "encoder-decoder: the image is the encoder input (no prompt placeholders); the decoder cross-attends"
        ),
    }
)

# model_type -> why it has no drop-in class (a view of `FAMILY_SPECS`).
NOT_ADAPTED_REASONS: Mapping[str, str] = MappingProxyType(
    {model_type: spec.not_adapted for model_type, spec in FAMILY_SPECS.items() if spec.not_adapted is not None}
)


def load_drop_in_classes() -> dict[str, type[PreTrainedModel]]:
    """model_type -> drop-in class, for every spec with one (this imports every family module).

    Returns:
        `dict[str, type[PreTrainedModel]]`, sorted by model type.
    """
    return {model_type: spec.drop_in_class() for model_type, spec in FAMILY_SPECS.items() if spec.drop_in is not None}
