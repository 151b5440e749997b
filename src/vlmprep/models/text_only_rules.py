"""The named text-only rules families pick from: how to take the text decoder out of a multimodal checkpoint.

`vlmprep.models.registry` gives each model type whose decoder loads alone one of these rules;
`vlmprep.text_only` applies it. Plain data: importing this module imports no model code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "COHERE2_VISION",
    "COSMOS3_OMNI_DECODER",
    "DOTS3_NOTE_DECODER",
    "GRANITE_DECODER",
    "GRANITE_TEXT_MODEL",
    "INKLING2_DECODER",
    "LANGUAGE_MODEL",
    "NEMOTRON_H_DECODER",
    "QWEN2_DECODER",
    "QWEN3_5_DECODER",
    "QWEN3_DECODER",
    "QWEN3_MOE_DECODER",
    "QWEN3_OMNI_MOE_DECODER",
    "TEXT_MODEL",
    "TextOnlyFamily",
]


@dataclass(frozen=True)
class TextOnlyFamily:
    """How to take the text decoder out of one multimodal family's checkpoint.

    Args:
        key_rules (`tuple[tuple[str, str | None], ...]`):
            `(checkpoint prefix, decoder prefix)` pairs, tried in order. A checkpoint key that starts with a checkpoint
            prefix belongs to the decoder and is renamed (a decoder prefix of `None` marks a prefix that is not the
            decoder's, before a broader one); every other key (vision tower, projector, ...) is never read.
        decoder_config_overrides (`tuple[tuple[str, Any], ...]`, *optional*, defaults to `()`):
            `(attribute, value)` pairs set on the decoder's config so that the decoder computes what the multimodal
            model computes on text.
        decoder_model_type (`str`, *optional*):
            For a text config with no causal-LM class of its own (`qwen2_vl_text`, ...): the model type of the
            causal-LM config its attributes are carried over to (`qwen2`, ...), multimodal rope keys dropped.
        key_renames (`tuple[tuple[str, str | None], ...]`, *optional*, defaults to `()`):
            `(checkpoint infix, decoder infix)` pairs applied to a key the prefix rules kept, for checkpoints that
            name a decoder module otherwise (`.self_attn.to_q.`); a decoder infix of `None` marks a key that is not
            the decoder's (another tower's weights kept inside the decoder's layers).
        logit_scale_probe (`tuple[tuple[str, Any], ...]`, *optional*, defaults to `()`):
            for a decoder that multiplies its logits by `logit_scale` under a multimodal class that may not: the
            keyword arguments of a tiny config of the multimodal type (sub-configs as pairs too: the rule stays
            hashable). The installed multimodal class is probed once
            on models of that config (`vlmprep.text_only.logit_scale`); the decoder keeps its `logit_scale` where the
            class applies it too, and gets 1 where it does not.
    """

    key_rules: tuple[tuple[str, str | None], ...]
    decoder_config_overrides: tuple[tuple[str, Any], ...] = ()
    decoder_model_type: str | None = None
    key_renames: tuple[tuple[str, str | None], ...] = ()
    logit_scale_probe: tuple[tuple[str, Any], ...] = ()

    def decoder_key(self, checkpoint_key: str) -> str | None:
        """The decoder's name for a checkpoint key, or `None` when the key is not a text-decoder tensor."""
        for source, target in self.key_rules:
            if checkpoint_key.startswith(source):
                return None if target is None else self._renamed(target + checkpoint_key[len(source) :])
        return None

    def _renamed(self, decoder_key: str) -> str | None:
        for source, target in self.key_renames:
            if source in decoder_key:
                if target is None:
                    return None
                decoder_key = decoder_key.replace(source, target)
        return decoder_key


# `save_pretrained` (transformers 5.2x) writes the legacy names `language_model.model.*` / `language_model.lm_head.*`
# for LLaVA-like families, and the module names `model.language_model.*` / `lm_head.*` for newer ones; Hub
# checkpoints use either. One rule set accepts both; a checkpoint holding a tensor under both names is an error.
_LANGUAGE_MODEL_KEYS = (
    ("language_model.model.", "model."),
    ("language_model.lm_head.", "lm_head."),
    ("model.language_model.", "model."),
    ("lm_head.", "lm_head."),
)
LANGUAGE_MODEL = TextOnlyFamily(key_rules=_LANGUAGE_MODEL_KEYS)

# Nemotron-H Omni is saved (by `save_pretrained` too, through transformers' conversion mapping) with its decoder under
# Nemotron-H's original names, `language_model.backbone.*` with one tensor per expert; `NemotronHForCausalLM` reads
# `backbone.*` through its own conversion mapping (which renames it and stacks the experts), as from its checkpoints.
NEMOTRON_H_DECODER = TextOnlyFamily(
    key_rules=(
        ("language_model.backbone.", "backbone."),
        ("language_model.model.", "model."),
        ("language_model.lm_head.", "lm_head."),
    )
)

# Idefics2/3 and SmolVLM keep the decoder under `model.text_model`.
TEXT_MODEL = TextOnlyFamily(key_rules=(("model.text_model.", "model."), ("lm_head.", "lm_head.")))

# Qwen-VL decoders are the Qwen2 / Qwen3 / Qwen3-MoE decoders with a multimodal rope. On text, the three position rows
# (t, h, w) are the same 1D positions, so every frequency section (interleaved or not) gets the same angle as in the
# 1D rope: the decoder is the plain causal LM, with the mrope keys dropped from its rope parameters.
# Qwen2-VL and Qwen2.5-VL are saved (and published) with the decoder at the top level, `model.layers.*` next to
# `visual.*`; Qwen3-VL under module names, `model.language_model.*` next to `model.visual.*`. Both are accepted.
_QWEN_VL_KEYS = (
    ("model.language_model.", "model."),
    ("model.visual.", None),
    ("model.", "model."),
    ("lm_head.", "lm_head."),
)
# Diffusers' attention module names and Qwen3's.
_DIFFUSERS_ATTENTION_NAMES = (
    ("to_q", "q_proj"),
    ("to_k", "k_proj"),
    ("to_v", "v_proj"),
    ("to_out", "o_proj"),
    ("norm_q", "q_norm"),
    ("norm_k", "k_norm"),
)
QWEN2_DECODER = TextOnlyFamily(key_rules=_QWEN_VL_KEYS, decoder_model_type="qwen2")
QWEN3_DECODER = TextOnlyFamily(key_rules=_QWEN_VL_KEYS, decoder_model_type="qwen3")
# Cosmos3 Omni is saved (by `save_pretrained` too, through transformers' conversion mapping) under its unified
# checkpoint's names: the decoder at the top level (`layers.*`, `embed_tokens.*`, `norm.*`) with Diffusers-style
# attention names (`to_q`, `norm_q`, ...), Qwen3-VL's tower as `blocks.*`, `merger.*`, ..., and in unified checkpoints
# the generator's weights inside the decoder layers (`add_q_proj`, `moe_gen`, ...), which the reasoner never reads.
# Module names (`model.language_model.*`) are accepted too. The decoder is Qwen3's, as Qwen3-VL's.
COSMOS3_OMNI_DECODER = TextOnlyFamily(
    key_rules=(
        *_QWEN_VL_KEYS,
        ("layers.", "model.layers."),
        ("embed_tokens.", "model.embed_tokens."),
        ("norm.", "model.norm."),
    ),
    decoder_model_type="qwen3",
    key_renames=(
        *((f".{generator}.", None) for generator in ("add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")),
        *((f".{generator}.", None) for generator in ("norm_added_q", "norm_added_k")),
        ("moe_gen", None),
        *((f".self_attn.{diffusers}.", f".self_attn.{qwen}.") for diffusers, qwen in _DIFFUSERS_ATTENTION_NAMES),
    ),
)
# Qwen3-VL-MoE's router always renormalizes the top-k probabilities; Qwen3-MoE does so only with `norm_topk_prob`.
QWEN3_MOE_DECODER = TextOnlyFamily(
    key_rules=_QWEN_VL_KEYS,
    decoder_config_overrides=(("norm_topk_prob", True),),
    decoder_model_type="qwen3_moe",
)

# The Qwen3-Omni thinker's decoder is Qwen3-MoE's with a multimodal rope (1D on text, as Qwen3-VL's); its router reads
# `norm_topk_prob` as Qwen3-MoE's does. Saved under module names, the audio tower (`model.audio_tower.*`) next to the
# vision tower.
QWEN3_OMNI_MOE_DECODER = TextOnlyFamily(
    key_rules=(("model.audio_tower.", None), *_QWEN_VL_KEYS), decoder_model_type="qwen3_moe"
)

# Qwen3.5's text config (`qwen3_5_text`, `qwen3_5_moe_text`) has a causal LM of its own, whose rotary embedding takes the
# same multimodal rope parameters (1D positions are expanded to three equal rows): the decoder as saved.
QWEN3_5_DECODER = TextOnlyFamily(key_rules=_QWEN_VL_KEYS)

# Granite 4 Vision's text config (`granite4_vision_text`) is Granite's, with no causal LM of its own; on text (no
# deepstack pairs) its decoder is Granite's, and both classes divide the logits by `logits_scaling`.
GRANITE_DECODER = TextOnlyFamily(key_rules=_LANGUAGE_MODEL_KEYS, decoder_model_type="granite")
# Granite Docling's (`granite_docling_text`) likewise, kept under `model.text_model` as Idefics3's.
GRANITE_TEXT_MODEL = TextOnlyFamily(key_rules=TEXT_MODEL.key_rules, decoder_model_type="granite")

# Cohere2ForCausalLM multiplies its logits by `logit_scale`; AyaVision does so too from transformers 5.25 on (not in
# 5.24), Cohere2Vision does not. The decoder keeps the scale where the installed multimodal class applies it, and gets 1
# where it does not, so that it returns the logits the multimodal model returns (and samples alike): probed on a model
# of this tiny Aya Vision / Cohere2 Vision config.
_COHERE2_VISION_PROBE = (
    (
        "text_config",
        (
            ("model_type", "cohere2"),
            ("hidden_size", 16),
            ("intermediate_size", 32),
            ("num_hidden_layers", 1),
            ("num_attention_heads", 2),
            ("num_key_value_heads", 1),
            ("head_dim", 8),
            ("vocab_size", 32),
            ("bos_token_id", 1),
            ("eos_token_id", 2),  # Cohere2's default ids lie outside the tiny vocabulary
        ),
    ),
    (
        "vision_config",
        (
            ("model_type", "siglip_vision_model"),
            ("hidden_size", 16),
            ("intermediate_size", 32),
            ("num_hidden_layers", 1),
            ("num_attention_heads", 2),
            ("image_size", 16),
            ("patch_size", 8),
        ),
    ),
    ("alignment_intermediate_size", 32),
)
COHERE2_VISION = TextOnlyFamily(key_rules=_LANGUAGE_MODEL_KEYS, logit_scale_probe=_COHERE2_VISION_PROBE)

# Inkling2 is saved (by `save_pretrained` too, through transformers' conversion mapping) under its original names, the
# decoder as `model.llm.*` next to `model.visual.*`, for `Inkling2ForCausalLM` as for the multimodal class; the causal
# LM reads those names as they are. The head, the logit soft-cap and the decoder are the same in both classes.
INKLING2_DECODER = TextOnlyFamily(key_rules=(("model.llm.", "model.llm."),))

# Dots 3 Note is saved (by `save_pretrained` too, through transformers' conversion mapping) under its original names:
# the decoder as `model.*` and `lm_head.*` (experts one by one), next to `vision_encoder.*` and `audio_encoder.*`, as its
# causal LM reads them. Under the module names the decoder is `model.language_model.*`, next to the towers.
DOTS3_NOTE_DECODER = TextOnlyFamily(
    key_rules=(
        ("model.language_model.", "model."),
        ("model.vision_tower.", None),
        ("model.audio_tower.", None),
        ("model.", "model."),
        ("lm_head.", "lm_head."),
    )
)
