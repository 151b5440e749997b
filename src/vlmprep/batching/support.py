"""Which families the continuous-batching engine runs exactly, and the error that says why for the others."""

from __future__ import annotations

import inspect

import transformers

from ..generation.mixin import VisionPrepGenerationMixin
from ..utils._compat import MAX_TRANSFORMERS_EXCLUSIVE, MIN_TRANSFORMERS
from ..utils._engine_compat import engine_hook_problems

# Attention implementations the engine runs with a mask it builds (plain eager becomes "paged|eager" in the engine)
_MASKED_ATTENTION = ("sdpa", "eager", "paged|eager")
# Decoder attributes transformers' paged cache reads once for every layer (`find_head_dim`, its memory estimate), and
# the latent width the check below reads
_ENGINE_GLOBAL_ATTRIBUTES = {
    "head_dim",
    "num_key_value_heads",
    "num_attention_heads",
    "hidden_size",
    "sliding_window",
    "kv_lora_rank",
}


def check_batching_support(model, with_items: bool = True) -> None:
    """Raise a clear error for a model whose requests the engine cannot run exactly.

    Gemma3's bidirectional image blocks are run exactly (`vlmprep.batching.blocks`) with sdpa or eager attention,
    whose mask the engine builds; a model loaded with flash attention (which takes no mask) is refused for images
    here. What the engine decides itself (switching to flash, its step size) is checked when a request is admitted.

    Families whose `generate` numbers tokens by the cache length (EXAONE 4.5, HyperCLOVAX: upstream's
    `prepare_inputs_for_generation` drops `position_ids`, so the decoder counts the cache, left padding included) run:
    the engine passes each request's own positions (`position_offset + i`), which the decoder uses as given, and
    a request is unpadded, so they are the cache length's numbering.

    Args:
        model: the model `init_continuous_batching` or `generate_batch` was called on.
        with_items (`bool`, *optional*, defaults to `True`): whether the request holds images (or videos).

    Raises:
        `TypeError`: the model is not a vlmprep drop-in.
        `ValueError`: the family needs attention or positions the engine does not build (see the message), or the
            installed transformers' engine lacks a method or attribute vlmprep extends (`utils/_engine_compat.py`).
    """
    if not isinstance(model, VisionPrepGenerationMixin):
        raise TypeError(
            f"Continuous batching with images needs a vlmprep drop-in model, got {type(model).__name__}. Load the "
            "model with vlmprep's class, e.g. `vlmprep.LlavaForConditionalGeneration.from_pretrained(...)`."
        )
    problems = engine_hook_problems()
    if problems:
        # An override whose upstream method was renamed would never run: requests would lose their images silently
        raise ValueError(
            f"transformers {transformers.__version__}'s continuous-batching engine lacks what vlmprep extends: "
            + "; ".join(problems)
            + f". Install transformers>={MIN_TRANSFORMERS},<{MAX_TRANSFORMERS_EXCLUSIVE}, or use `generate`."
        )
    facts = model.vision_facts
    name = type(model).__name__
    refusal = getattr(model, "continuous_batching_refusal", None)
    if refusal is not None and refusal() is not None:  # a family (its layout) that states why it is not run
        raise ValueError(f"{name}: {refusal()} Use `generate` for this model.")
    if model.config.is_encoder_decoder:
        raise ValueError(
            f"{name} is an encoder-decoder: transformers' continuous-batching engine schedules decoder-only requests "
            "(one paged self-attention cache, no encoder pass and no cross-attention cache per request), so it cannot "
            "run this model. Use `generate` (it takes a batch of prompts; the encoder cache keeps each image's "
            "features across calls)."
        )
    layer_types = set(getattr(model.config.get_text_config(), "layer_types", None) or ())
    other_layers = sorted(layer_types - {"full_attention", "sliding_attention"})
    if other_layers:
        raise ValueError(
            f"{name}'s decoder has {other_layers} layers, which transformers' paged cache does not hold (it keeps "
            "attention layers only), also for text. Use `generate` for this model."
        )
    per_layer = sorted(set(getattr(model.config.get_text_config(), "per_layer_attributes", None) or ()))
    if set(per_layer) & _ENGINE_GLOBAL_ATTRIBUTES:
        # Plain transformers fails here too, with `AmbiguousGlobalPerLayerAttributeError` from its paged cache
        raise ValueError(
            f"{name}'s decoder layers differ in {per_layer} (its config's `per_layer_config`, e.g. Gemma 4's "
            "full-attention layers with their own head dimension), which transformers' paged cache does not hold (it "
            "reads one `num_key_value_heads`, `head_dim` and `num_attention_heads` for every layer), also for text. Use "
            "`generate` for this model."
        )
    if "moe_mm_token_type_ids" in inspect.signature(model.forward).parameters:
        raise ValueError(
            f"{name}'s decoder routes placeholder tokens to its vision experts by `moe_mm_token_type_ids`, a per-token "
            "input the engine does not pass to its steps, so its answers would differ from `generate`'s. Use "
            "`generate` for this model."
        )
    if with_items and model.item_independent_encoder_fields("image"):
        raise ValueError(
            f"{name} replaces the text embeddings of its image indicator tokens with vision embeddings in every "
            "forward that feeds images, so in an engine step packing several requests it would also replace those of "
            "requests without images; the engine does not feed them apart. Use `generate` for prompts with images."
        )
    if getattr(model.config.get_text_config(), "kv_lora_rank", None):
        raise ValueError(
            f"{name}'s decoder uses latent attention (it caches one compressed `kv_lora_rank` head per token), which "
            "transformers' paged cache does not hold (it keeps `num_key_value_heads` heads of `head_dim`), also for "
            "text. Use `generate` for this model."
        )
    # PaliGemma's prefix (image and prompt text) is bidirectional in every prompt, images or not. Gemma3's image
    # blocks are run exactly (`vlmprep.batching.blocks`), the checks that need the engine happen at admission.
    if facts.bidirectional == "prefix":
        raise ValueError(
            f"{name} attends bidirectionally over its whole prefix (image and prompt text, `{facts.bidirectional}`), "
            "but the engine's paged attention masks every packed request causally and may cut a prompt anywhere, "
            "which would give wrong answers. Use `generate` (with `prefill_chunk_size` for long prompts) for this "
            "model."
        )
    if with_items and facts.bidirectional == "items":
        raise ValueError(
            f"{name}'s image tokens attend to each other across all images of a prompt (the text between them "
            "causal), but the engine's paged attention masks every packed request causally and may cut a prompt "
            "between two images, which would give wrong answers. Use `generate` (with `prefill_chunk_size` for long "
            "prompts) for prompts with images."
        )
    if with_items and facts.bidirectional == "image" and model.config._attn_implementation not in _MASKED_ATTENTION:
        raise ValueError(
            f"{name}'s image placeholders attend to each other bidirectionally, which needs the engine's attention "
            f"mask, but its attention ({model.config._attn_implementation}) takes none. Load the model with "
            "`attn_implementation='sdpa'` (or 'eager'), or use `generate`."
        )
