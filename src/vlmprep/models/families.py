"""Why each image-text-to-text model type of transformers has no vlmprep drop-in class (yet).

One reason per model type of `MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES` that has no drop-in, read off the family's
modeling file. `utils/families_table.py` writes them into `docs/families.md` and fails when a model type has neither a
drop-in nor a reason here, so the docs and the code state the same thing.

Reasons come in a few kinds:

- **candidate**: "not yet adapted (placeholder-based: candidate; ...)": image features fill a run of placeholder tokens
  per image (or per crop) through `mm_encoder_outputs`, as the span mechanism expects; the drop-in has not been
  written and tested yet;
- **needs more than spans**: multimodal rope, deepstack features, several placeholder runs per image, audio encoded
  inside the forward, a generation loop of its own: the mechanism needs an extension first;
- **does not fit**: encoder-decoder models, cross-attention to the image, no placeholder tokens, no token generation,
  or a vision tower that needs `timm` (not a vlmprep dependency, so the model cannot even be built here).
"""

from __future__ import annotations

__all__ = ["CANDIDATE", "NOT_ADAPTED_REASONS"]

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


def _candidate(details: str) -> str:
    return f"{CANDIDATE[:-1]}; {details})"


# model_type -> why it has no drop-in class. Every model type of transformers' image-text-to-text mapping that is not
# in `vlmprep.models.DROP_IN_CLASSES` has an entry; a family whose drop-in lands drops its entry.
NOT_ADAPTED_REASONS: dict[str, str] = {
    "apertus1p5": (
        "image placeholders are one run per row, split by end-of-line tokens (discrete vision tokenizer); "
        + _AUDIO_IN_FORWARD
    ),
    "blip": "own `generate`: the BERT text decoder cross-attends to the image embeddings; no image placeholders",
    "blip-2": (
        "own `generate` runs the vision tower and Q-Former, then the language model's `generate` with "
        "`inputs_embeds` (Flan-T5 checkpoints are encoder-decoder)"
    ),
    "chameleon": _candidate("a VQ-VAE turns each image into `image_seq_length` vocabulary tokens"),
    "cohere_compass": f"{_MROPE} and {_DEEPSTACK}; the Qwen3-VL hooks exist (see qwen3_vl), this drop-in is not written yet",
    "cosmos3_edge": f"{_MROPE}; the Qwen-VL position hook exists (see qwen2_vl), this drop-in is not written yet",
    "cosmos3_omni": f"Qwen3-VL-based: {_MROPE} and {_DEEPSTACK}",
    "deepseek_ocr2": _candidate(
        "one run per image covering its global view, its `num_local_patches` crops (`pixel_values_local`) and a "
        "separator"
    ),
    "diffusion_gemma": (
        "block-diffusion model: its own generation mixin denoises blocks of tokens, not the autoregressive loop "
        "whose hooks vlmprep overrides"
    ),
    "dots3_note": f"omni model: {_AUDIO_IN_FORWARD}",
    "emu3": _candidate("VQ-VAE image tokens, `height * (width + 1)` placeholders per image from `image_sizes`"),
    "ernie4_5_vl_moe": f"{_MROPE} and modality-routed MoE (`moe_mm_token_type_ids`)",
    "evolla": "protein-text model: a SaProt protein encoder feeds the decoder through cross-attention; no placeholders",
    "fast_vlm": f"vision tower is a timm FastViT (`TimmWrapperModel`): {_TIMM}",
    "florence2": "encoder-decoder (BART): image features join the prompt in the encoder; the decoder cross-attends",
    "fuyu": (
        "no vision tower (patches embedded by one linear layer, read as `last_hidden_state`); an image's "
        "placeholders are split into rows by `|NEWLINE|` tokens"
    ),
    "gemma3n": f"vision tower is timm's MobileNetV5 (`TimmWrapperModel`): {_TIMM}; also {_AUDIO_IN_FORWARD}",
    "gemma4": (
        f"{_AUDIO_IN_FORWARD}; images (soft tokens from `image_position_ids`, bidirectional on sliding layers "
        'when `use_bidirectional_attention="vision"`) not yet adapted'
    ),
    "gemma4_unified": "encoder-free: images and audio are embedded inside the forward, there is no vision tower to run once",
    "git": "image embeddings are concatenated in front of the text inside the forward; no placeholder tokens",
    "glm5_next": _candidate("flattened patches + `image_grid_thw`, 1D positions; hybrid linear-attention decoder"),
    "glm_ocr": f"{_MROPE}; the Qwen-VL position hook exists (see qwen2_vl), this drop-in is not written yet",
    "glmga": f"`Glm46VForConditionalGeneration` under its own config type; {_MROPE}",
    "granite4_vision": (
        "image features enter by deepstack injection at several decoder layers (placeholders zeroed, "
        "`deepstack_features` summed in), which the mixin does not slice per chunk"
    ),
    "granite_docling": (
        "an image is several runs (one per tile behind `<row_i_col_j>`, then the global image) and features also "
        f"enter as {_DEEPSTACK}"
    ),
    "hunyuan_vl": f"{_MROPE}; the Qwen-VL position hook exists (see qwen2_vl), this drop-in is not written yet",
    "hy_v4_vl": f"{_MROPE}, with an indexed-attention decoder",
    "idefics": "Flamingo-style: gated cross-attention layers read the image states; no placeholder tokens",
    "idefics2": _candidate("each crop is one 64-token perceiver run between `<fake_token_around_image>` tokens"),
    "inkling2": _candidate("flattened patches + `image_grid_thw`, 1D positions; hybrid linear-attention decoder"),
    "inkling2_loop": _candidate("flattened patches + `image_grid_thw`, 1D positions; hybrid linear-attention decoder"),
    "inkling_mm_model": f"omni model: {_AUDIO_IN_FORWARD}",
    "instructblip": (
        "own `generate` runs the vision tower and Q-Former (conditioned on `qformer_input_ids`), then the language "
        "model's `generate` with `inputs_embeds`"
    ),
    "instructblipvideo": (
        "own `generate` runs the frames through the Q-Former, then the language model's `generate` with "
        "`inputs_embeds`"
    ),
    "janus": _candidate(
        "fixed `num_image_tokens` between start/end tokens; its `generate` delegates text mode to transformers'"
    ),
    "kimi_k25": _candidate("flattened patches + `image_grid_thw`, 1D positions"),
    "kosmos-2": "own `generate`: image features are placed by `image_embeds_position_mask`, not `mm_encoder_outputs`",
    "kosmos-2.5": (
        "image features from `flattened_patches` are placed by `image_embeds_position_mask` inside the forward, "
        "not through `mm_encoder_outputs`"
    ),
    "llama4": (
        "transformers' `Llama4ForConditionalGeneration.forward` fails on every call (it reads `image_outputs` from "
        "the causal-LM output: AttributeError), so there is no upstream model to be exact against; tiles would fit "
        "the spans (one contiguous `<|patch|>` run and one `pixel_values` row each)"
    ),
    "minicpm_ocr": (
        "an image is several runs (global view, then one run per slice between slice start/end tokens), each with "
        "its own token count; Qwen3.5 hybrid decoder"
    ),
    "minicpmv4_6": (
        "an image is several runs (global view, then one run per slice between slice start/end tokens), each with "
        "its own token count; Qwen3.5 hybrid decoder"
    ),
    "minicpmv4_7": f"an image is several runs (global view, then one per slice); {_MROPE}",
    "minimax_m3_vl": _candidate("flattened patches + `image_grid_thw` between vision start/end tokens, 1D positions"),
    "mistral4": "text-only decoder (`Mistral4ForCausalLM`): no image inputs to prepare",
    "mistral_large4": f"{_PIXTRAL_ROWS} (as in mistral3), with an indexed-attention MoE decoder: not yet adapted",
    "mllama": "cross-attention layers read the image states (`cross_attention_states`); no placeholder tokens",
    "molmo2": (
        "features are pooled per placeholder from `image_token_pooling` indices, and an image is a low-res and a "
        "high-res part with `<im_col>` tokens between rows"
    ),
    "muse_glimmer": _candidate("flattened patches + `image_grid_thw` between image start/end tokens, 1D positions"),
    "muse_spark": f"omni model: {_AUDIO_IN_FORWARD}",
    "nemotron_h_omni": f"omni model: {_AUDIO_IN_FORWARD}; hybrid Mamba decoder",
    "ovis2": (
        "the model also reads `visual_indicator_features` from `mm_encoder_outputs` (image indicator tokens get "
        "vision embeddings), and a tiled image is several runs split by `<IMG_COL>`/`<IMG_ROW>`"
    ),
    "paddleocr_vl": f"{_MROPE}; the Qwen-VL position hook exists (see qwen2_vl), this drop-in is not written yet",
    "perception_lm": f"vision tower is a timm Perception Encoder (`TimmWrapperModel`): {_TIMM}",
    "pi0": "vision-language-action policy: `sample_actions` denoises continuous actions; not a `GenerationMixin` model",
    "pix2struct": "encoder-decoder over `flattened_patches` (the prompt is rendered into the image); the decoder cross-attends",
    "pp_chart2table": (
        "`GotOcr2ForConditionalGeneration` under its own config type; drop-ins are registered by "
        "`config_class.model_type`, so this type loads transformers' class"
    ),
    "pp_formulanet": "encoder-decoder: the image is the encoder input and the decoder cross-attends; no placeholders",
    "qwen2_5_omni_thinker": f"omni model: {_AUDIO_IN_FORWARD}; {_MROPE} with audio-video interleaving",
    "qwen3_5": f"{_MROPE}, with a hybrid Gated-DeltaNet decoder: not yet adapted",
    "qwen3_5_moe": f"{_MROPE}, with a hybrid Gated-DeltaNet decoder: not yet adapted",
    "qwen3_omni_moe_thinker": f"omni model: {_AUDIO_IN_FORWARD}; {_MROPE} and deepstack features",
    "qwen4_exp": f"{_MROPE}, with a hybrid Gated-DeltaNet decoder: not yet adapted",
    "shieldgemma2": (
        "`Gemma3ForConditionalGeneration` under its own config type; drop-ins are registered by "
        "`config_class.model_type` (`gemma3`), so this type loads transformers' class"
    ),
    "step3p7": (
        "an image is several runs (one per local crop between `<patch_start>`/`<patch_end>`, then the global view) "
        "from two pixel inputs (`pixel_values`, `pixel_values_local`)"
    ),
    "t5gemma2": "encoder-decoder: image placeholders are in the encoder's input; the decoder cross-attends",
    "udop": "encoder-decoder (T5) over text, layout boxes and image patches; the decoder cross-attends",
    "unlimited_ocr": (
        "its own `_prefill` (a reference sliding-window cache that pins the prefill region) is the hook the vlmprep "
        "mixin replaces; the two need merging"
    ),
    "video_llama_3": _candidate("flattened patches + `image_grid_thw` and `image_merge_sizes`, 1D positions"),
    "vision-encoder-decoder": "encoder-decoder: the image is the encoder input (no prompt placeholders); the decoder cross-attends",
}
