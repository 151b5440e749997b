"""One table of what vlmprep states about every model type: its status, and its drop-in class, text-only rule
and tiny test config, or what stands in the way of a drop-in today.

`FAMILY_SPECS` is keyed by model type (the `config_class.model_type` of the transformers class, which is how
`vlmprep.AutoModelForImageTextToText` picks a drop-in). Each spec has one status (`STATUSES`):

- **drop-in**: names its class (imported only when asked for; the class states its layout by its layout base, see
  `vlmprep.models.layouts`) and the builder of its tiny test config (`vlmprep.testing.configs`);
- **alias**: a config type that transformers builds as another model type's class under its own name
  (`shieldgemma2` is `Gemma3ForConditionalGeneration`): it loads that model type's drop-in;
- **candidate**: image features fill runs of placeholder tokens through `mm_encoder_outputs`, as the spans expect;
  the reason says what the drop-in still needs;
- **not placeholder-based**: images do not reach an autoregressive `generate` through placeholder tokens
  (encoder-decoder, cross-attention, embeddings joined inside the forward, no token generation);
- **blocked upstream**: transformers itself stands in the way (a forward that fails, a tower that needs a package
  vlmprep does not depend on).

A reason says what stands in the way with transformers as it is now (the lowest supported version's source), not how
it came to be. A model type that a newer supported transformers added states that release (`since`): under an older
one its spec is in `NEWER_FAMILY_SPECS`, not in `FAMILY_SPECS`, so nothing loads, lists or tests it there. Any spec may have a text-only rule (`vlmprep.models.text_only_rules`), which `vlmprep.text_only`
applies. `utils/families_table.py` writes the table into docs/families.md and fails when an image-text-to-text model
type of transformers has no entry; `utils/check_exports.py` checks each drop-in against its module, class and layout.

Plain data: importing this module imports no model code.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from .family_spec import (
    ALIAS,
    BLOCKED_UPSTREAM,
    CANDIDATE,
    DROP_IN,
    NOT_PLACEHOLDER_BASED,
    STATUSES,
    FamilySpec,
    alias,
    blocked_upstream,
    candidate,
    drop_in,
    not_placeholder_based,
)
from .text_only_rules import (
    COHERE2_VISION,
    COSMOS3_OMNI_DECODER,
    DOTS3_NOTE_DECODER,
    GRANITE_DECODER,
    GRANITE_TEXT_MODEL,
    INKLING2_DECODER,
    LANGUAGE_MODEL,
    NEMOTRON_H_DECODER,
    QWEN2_DECODER,
    QWEN3_5_DECODER,
    QWEN3_DECODER,
    QWEN3_MOE_DECODER,
    QWEN3_OMNI_MOE_DECODER,
    TEXT_MODEL,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "ALIAS",
    "BLOCKED_UPSTREAM",
    "CANDIDATE",
    "DROP_IN",
    "ALL_FAMILY_SPECS",
    "FAMILY_SPECS",
    "NEWER_FAMILY_SPECS",
    "NOT_ADAPTED_REASONS",
    "NOT_PLACEHOLDER_BASED",
    "STATUSES",
    "FamilySpec",
    "drop_in_class_of",
    "load_drop_in_classes",
]

_MROPE = "multimodal rope from the model's own `get_rope_index` (as qwen2_vl's)"
_AUDIO_IN_FORWARD = (
    "audio clips fit the spans (a modality, as Gemma 4's: a `clip` of the item vocabulary), and transformers' forward "
    "takes audio only as `input_features`, so the drop-in states an `AudioPlacement` for the shared forward that "
    "places encoded rows (as Gemma 4's does); not written yet"
)
# Tried (issue 27): `timm` installs alone, but imports `torchvision`, whose only wheels in the package registry are CUDA
# builds; the one for torch 2.13.0 (0.28.0) links `libc10_cuda.so`, so with the CPU torch its ops do not load.
_TIMM = (
    "needs `timm`, which imports `torchvision`: the registry's torchvision for torch 2.13.0 (0.28.0) is a CUDA build "
    "whose ops fail to load with the CPU torch (`operator torchvision::nms does not exist`), and installing it with "
    "its dependencies replaces torch, so the model cannot be built or tested here"
)
# Items in several runs: the spans take an item in pieces (`item_token_counts` gives a list of run lengths per item,
# as `patch_grid_per_frame`'s videos and LLaVA-OneVision's multi-image items do); what a family adds is the counts.
_PIECES = "the spans take an item in pieces (as `patch_grid_per_frame`'s videos), so it needs only its per-run counts"
# Hybrid decoders of these families are the ones the prefix store snapshots (`linear_attention`/`conv` cache layers).
_QWEN3_5_DECODER = "its Qwen3.5 decoder is the qwen3_5 drop-in's (recurrent layers snapshotted by the prefix store)"


# model_type -> spec. Every model type of the image-text-to-text mapping of every supported transformers has an entry,
# and so does every other type with a text-only rule.
ALL_FAMILY_SPECS: Mapping[str, FamilySpec] = MappingProxyType(
    {
        "apertus1p5": drop_in("apertus1p5.Apertus1p5ForConditionalGeneration", LANGUAGE_MODEL),
        "aria": drop_in("aria.AriaForConditionalGeneration"),
        "aya_vision": drop_in("aya_vision.AyaVisionForConditionalGeneration", COHERE2_VISION),
        "blip": not_placeholder_based(
            "own `generate`: the vision tower runs there and the BERT text decoder's own `generate` "
            "cross-attends to its output, so none of the generation hooks vlmprep prepares items in is reached"
        ),
        "blip-2": drop_in("blip_2.Blip2ForConditionalGeneration", LANGUAGE_MODEL),
        "chameleon": drop_in("chameleon.ChameleonForConditionalGeneration"),
        "cohere2_vision": drop_in("cohere2_vision.Cohere2VisionForConditionalGeneration", COHERE2_VISION),
        "cohere_compass": drop_in("cohere_compass.CohereCompassForConditionalGeneration", LANGUAGE_MODEL),
        "cosmos3_edge": drop_in("cosmos3_edge.Cosmos3EdgeForConditionalGeneration"),
        "cosmos3_omni": drop_in("cosmos3_omni.Cosmos3OmniForConditionalGeneration", COSMOS3_OMNI_DECODER),
        "deepseek_ocr2": drop_in("deepseek_ocr2.DeepseekOcr2ForConditionalGeneration"),
        "deepseek_vl": drop_in("deepseek_vl.DeepseekVLForConditionalGeneration", LANGUAGE_MODEL),
        "deepseek_vl_hybrid": drop_in("deepseek_vl_hybrid.DeepseekVLHybridForConditionalGeneration"),
        "diffusion_gemma": not_placeholder_based(
            "block-diffusion model: its own generation mixin denoises blocks of tokens, not the autoregressive loop "
            "whose hooks vlmprep overrides"
        ),
        "dots3_note": drop_in("dots3_note.Dots3NoteForConditionalGeneration", DOTS3_NOTE_DECODER),
        "emu3": drop_in("emu3.Emu3ForConditionalGeneration"),
        "ernie4_5_vl_moe": drop_in("ernie4_5_vl_moe.Ernie4_5_VLMoeForConditionalGeneration"),
        "evolla": not_placeholder_based(
            "protein-text model: a SaProt protein encoder feeds the decoder through cross-attention; no placeholders"
        ),
        "exaone4_5": drop_in("exaone4_5.Exaone4_5_ForConditionalGeneration"),
        "fast_vlm": candidate(f"one placeholder run per image, but the vision tower is timm's FastViT: {_TIMM}"),
        "florence2": drop_in("florence2.Florence2ForConditionalGeneration"),
        "fuyu": drop_in("fuyu.FuyuForCausalLM", LANGUAGE_MODEL),
        "gemma3": drop_in("gemma3.Gemma3ForConditionalGeneration", LANGUAGE_MODEL),
        "gemma3n": blocked_upstream(f"its vision tower is timm's MobileNetV5: {_TIMM}; then {_AUDIO_IN_FORWARD}"),
        "gemma4": drop_in("gemma4.Gemma4ForConditionalGeneration", LANGUAGE_MODEL),
        "gemma4_unified": not_placeholder_based(
            "encoder-free: images and audio are embedded inside the forward, there is no vision tower to run once"
        ),
        "git": not_placeholder_based(
            "the forward takes only `pixel_values` and joins the image embeddings in front of the text inside "
            "itself: no placeholders to fill, no encoded input or cross-attention state to hand it"
        ),
        "glm46v": drop_in("glm46v.Glm46VForConditionalGeneration"),
        "glm4v": drop_in("glm4v.Glm4vForConditionalGeneration"),
        "glm4v_moe": drop_in("glm4v_moe.Glm4vMoeForConditionalGeneration"),
        "glm5_next": drop_in("glm5_next.Glm5NextForConditionalGeneration"),
        "glm_ocr": drop_in("glm_ocr.GlmOcrForConditionalGeneration"),
        "glmga": alias("glm46v"),
        "got_ocr2": drop_in("got_ocr2.GotOcr2ForConditionalGeneration", LANGUAGE_MODEL),
        "granite4_vision": drop_in("granite4_vision.Granite4VisionForConditionalGeneration", GRANITE_DECODER),
        "granite_docling": drop_in("granite_docling.GraniteDoclingForConditionalGeneration", GRANITE_TEXT_MODEL),
        "hunyuan_vl": drop_in("hunyuan_vl.HunYuanVLForConditionalGeneration"),
        "hy_v4_vl": drop_in("hy_v4_vl.HYV4VLForConditionalGeneration"),
        "hyperclovax_vision_v2": drop_in("hyperclovax_vision_v2.HyperCLOVAXVisionV2ForConditionalGeneration"),
        "idefics": drop_in("idefics.IdeficsForVisionText2Text"),
        "idefics2": drop_in("idefics2.Idefics2ForConditionalGeneration", TEXT_MODEL),
        "idefics3": drop_in("idefics3.Idefics3ForConditionalGeneration", TEXT_MODEL),
        "inkling2": drop_in("inkling2.Inkling2ForConditionalGeneration", INKLING2_DECODER),
        "inkling2_loop": drop_in("inkling2_loop.Inkling2LoopForConditionalGeneration", INKLING2_DECODER),
        "inkling_mm_model": drop_in("inkling_mm_model.InklingForConditionalGeneration"),
        "instructblip": drop_in("instructblip.InstructBlipForConditionalGeneration", LANGUAGE_MODEL),
        "instructblipvideo": drop_in("instructblipvideo.InstructBlipVideoForConditionalGeneration", LANGUAGE_MODEL),
        "internvl": drop_in("internvl.InternVLForConditionalGeneration", LANGUAGE_MODEL),
        "janus": drop_in("janus.JanusForConditionalGeneration", LANGUAGE_MODEL),
        "kimi_k25": drop_in("kimi_k25.Kimi_K25ForConditionalGeneration"),
        "kosmos-2": not_placeholder_based(
            "own `generate`: image features are placed by `image_embeds_position_mask`, not `mm_encoder_outputs`"
        ),
        "kosmos-2.5": not_placeholder_based(
            "image features are placed where `image_embeds_position_mask` is set, inside the forward, not at "
            "placeholder ids through `mm_encoder_outputs`; its forward does take them encoded (`image_embeds`), "
            "so the tower could run once, but a layout that places rows by that mask is not written yet"
        ),
        "lfm2_vl": drop_in("lfm2_vl.Lfm2VlForConditionalGeneration", LANGUAGE_MODEL),
        "lfm3_vl": drop_in("lfm3_vl.Lfm3VlForConditionalGeneration"),
        "lighton_ocr": drop_in("lighton_ocr.LightOnOcrForConditionalGeneration", LANGUAGE_MODEL),
        "llama4": drop_in(
            "llama4.Llama4ForConditionalGeneration",
            since="5.25",
            older=blocked_upstream(
                "transformers' `Llama4ForConditionalGeneration.forward` fails on every call (it reads `image_outputs` "
                "from the causal-LM output: AttributeError), so there is no upstream model to be exact against; tiles "
                "would fit the spans (one contiguous `<|patch|>` run and one `pixel_values` row each)"
            ),
        ),
        "llava": drop_in("llava.LlavaForConditionalGeneration", LANGUAGE_MODEL),
        "llava_next": drop_in("llava_next.LlavaNextForConditionalGeneration", LANGUAGE_MODEL),
        "llava_next_video": drop_in("llava_next_video.LlavaNextVideoForConditionalGeneration", LANGUAGE_MODEL),
        "llava_onevision": drop_in("llava_onevision.LlavaOnevisionForConditionalGeneration", LANGUAGE_MODEL),
        "llava_onevision1_5": drop_in("llava_onevision1_5.LlavaOnevision15ForConditionalGeneration", since="5.25"),
        "minicpm_ocr": drop_in("minicpm_ocr.MiniCPMOcrForConditionalGeneration", LANGUAGE_MODEL),
        "minicpmv4_6": drop_in("minicpmv4_6.MiniCPMV4_6ForConditionalGeneration", LANGUAGE_MODEL),
        "minicpmv4_7": drop_in("minicpmv4_7.MiniCPMV4_7ForConditionalGeneration", LANGUAGE_MODEL),
        "minimax_m3_vl": drop_in("minimax_m3_vl.MiniMaxM3SparseForConditionalGeneration"),
        "mistral3": drop_in("mistral3.Mistral3ForConditionalGeneration", LANGUAGE_MODEL),
        "mistral4": not_placeholder_based("text-only decoder (`Mistral4ForCausalLM`): no image inputs to prepare"),
        "mistral_large4": drop_in("mistral_large4.MistralLarge4ForConditionalGeneration"),
        "mllama": drop_in("mllama.MllamaForConditionalGeneration", LANGUAGE_MODEL),
        "molmo2": drop_in("molmo2.Molmo2ForConditionalGeneration"),
        "muse_glimmer": drop_in("muse_glimmer.MuseGlimmerForConditionalGeneration"),
        "muse_spark": drop_in("muse_spark.MuseSparkForConditionalGeneration"),
        "nemotron_h_omni": drop_in("nemotron_h_omni.NemotronH_Omni_Reasoning_V3", NEMOTRON_H_DECODER),
        "ovis2": drop_in("ovis2.Ovis2ForConditionalGeneration", LANGUAGE_MODEL),
        "ovis2_5": drop_in("ovis2_5.Ovis2_5ForConditionalGeneration", since="5.25"),
        "paddleocr_vl": drop_in("paddleocr_vl.PaddleOCRVLForConditionalGeneration"),
        "paligemma": drop_in("paligemma.PaliGemmaForConditionalGeneration", LANGUAGE_MODEL),
        "perception_lm": candidate(f"the vision tower is a timm Perception Encoder: {_TIMM}"),
        "pi0": not_placeholder_based(
            "vision-language-action policy: `sample_actions` denoises continuous actions; not a `GenerationMixin` "
            "model"
        ),
        "pi05": not_placeholder_based(
            "vision-language-action policy (PI0.5): `sample_actions` denoises continuous actions with a flow-matching "
            "action expert; not a `GenerationMixin` model, it has no `generate`",
            since="5.25",
        ),
        "pix2struct": not_placeholder_based(
            "encoder-decoder whose prompt is rendered into the image (`flattened_patches`): a new prompt is a "
            "new encoder input, with no part to reuse, and the encoder is the model's own (no vision tower to "
            "run once)"
        ),
        "pp_chart2table": alias("got_ocr2"),
        "pp_formulanet": not_placeholder_based(
            "encoder-decoder with no prompt: the image is the whole encoder input and one call decodes it, so "
            "there is no other prompt on a cached image to save the tower for (a caller reuses an image's "
            "encoding with `generate(encoder_outputs=...)`)"
        ),
        "qianfan_ocr": drop_in("qianfan_ocr.QianfanOCRForConditionalGeneration"),
        "qwen2_5_omni_thinker": drop_in("qwen2_5_omni.Qwen2_5OmniThinkerForConditionalGeneration"),
        "qwen2_5_vl": drop_in("qwen2_5_vl.Qwen2_5_VLForConditionalGeneration", QWEN2_DECODER),
        "qwen2_vl": drop_in("qwen2_vl.Qwen2VLForConditionalGeneration", QWEN2_DECODER),
        "qwen3_5": drop_in("qwen3_5.Qwen3_5ForConditionalGeneration", QWEN3_5_DECODER),
        "qwen3_5_moe": drop_in("qwen3_5_moe.Qwen3_5MoeForConditionalGeneration", QWEN3_5_DECODER),
        "qwen3_omni_moe_thinker": drop_in(
            "qwen3_omni_moe.Qwen3OmniMoeThinkerForConditionalGeneration", QWEN3_OMNI_MOE_DECODER
        ),
        "qwen3_vl": drop_in("qwen3_vl.Qwen3VLForConditionalGeneration", QWEN3_DECODER),
        "qwen3_vl_moe": drop_in("qwen3_vl_moe.Qwen3VLMoeForConditionalGeneration", QWEN3_MOE_DECODER),
        "qwen4_exp": drop_in("qwen4_exp.Qwen4ExpForConditionalGeneration", QWEN3_5_DECODER),
        "shieldgemma2": alias("gemma3"),
        "smolvlm": drop_in("smolvlm.SmolVLMForConditionalGeneration", TEXT_MODEL),
        "step3p7": drop_in("step3p7.Step3p7ForConditionalGeneration"),
        "t5gemma2": drop_in("t5gemma2.T5Gemma2ForConditionalGeneration"),
        "udop": not_placeholder_based(
            "encoder-decoder (T5) whose encoder embeds image patches with one linear layer, together with the "
            "words and their layout boxes: no vision tower to run once, and the whole encoder depends on the "
            "prompt"
        ),
        "unlimited_ocr": drop_in("unlimited_ocr.UnlimitedOcrForConditionalGeneration"),
        "video_llama_3": drop_in("video_llama_3.VideoLlama3ForConditionalGeneration", LANGUAGE_MODEL),
        "video_llava": drop_in("video_llava.VideoLlavaForConditionalGeneration", LANGUAGE_MODEL),
        "vipllava": drop_in("vipllava.VipLlavaForConditionalGeneration", LANGUAGE_MODEL),
        "vision-encoder-decoder": not_placeholder_based(
            "encoder-decoder whose encoder is the vision model alone: there are no placeholders or image "
            "features in a prompt to prepare, the encoder's whole output is the image's (a caller reuses it "
            "across decoder prompts with `generate(encoder_outputs=...)`)"
        ),
    }
)

# The specs of the model types the installed transformers has (every one without `since`, those at or after it, and
# the `older` spec of a type adapted only from a later release): what loads, lists and tests drop-ins reads these.
# Under an older transformers the specs starting later are `NEWER_FAMILY_SPECS` (a type may be in both: its `older`
# spec here, its drop-in there).
FAMILY_SPECS: Mapping[str, FamilySpec] = MappingProxyType(
    {
        model_type: spec if spec.installed else spec.older
        for model_type, spec in ALL_FAMILY_SPECS.items()
        if spec.installed or spec.older is not None
    }
)
NEWER_FAMILY_SPECS: Mapping[str, FamilySpec] = MappingProxyType(
    {model_type: spec for model_type, spec in ALL_FAMILY_SPECS.items() if not spec.installed}
)

# model_type -> what stands in the way of a drop-in, for every type that loads none (a view of `FAMILY_SPECS`).
NOT_ADAPTED_REASONS: Mapping[str, str] = MappingProxyType(
    {model_type: spec.reason for model_type, spec in FAMILY_SPECS.items() if spec.reason is not None}
)


def drop_in_class_of(model_type: str) -> type[PreTrainedModel]:
    """The drop-in class a model type loads (an alias's is its model type's), imported on first use.

    Args:
        model_type (`str`): a key of `FAMILY_SPECS`.

    Returns:
        `type[PreTrainedModel]`: the drop-in class.
    """
    spec = FAMILY_SPECS[model_type]
    return FAMILY_SPECS[spec.alias_of].drop_in_class() if spec.status == ALIAS else spec.drop_in_class()


def load_drop_in_classes() -> dict[str, type[PreTrainedModel]]:
    """model_type -> drop-in class, for every drop-in and every alias of one (this imports every family module).

    Returns:
        `dict[str, type[PreTrainedModel]]`, sorted by model type.
    """
    return {
        model_type: drop_in_class_of(model_type)
        for model_type, spec in FAMILY_SPECS.items()
        if spec.status in (DROP_IN, ALIAS)
    }
