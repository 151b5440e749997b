"""Which families the continuous-batching engine runs exactly, and the error that says why for the others."""

from __future__ import annotations


def check_batching_support(model, with_items: bool = True) -> None:
    """Raise a clear error for a model whose requests the engine cannot run exactly.

    Some families are exact in the engine for text but not for images (Gemma3's bidirectional image blocks): their
    text-only requests run as upstream runs them.

    Families whose `generate` numbers tokens by the cache length (EXAONE 4.5, HyperCLOVAX: upstream's
    `prepare_inputs_for_generation` drops `position_ids`, so the decoder counts the cache, left padding included) run:
    the engine passes each request's own positions (`position_offset + i`), which the decoder uses as given, and
    a request is unpadded, so they are the cache length's numbering.

    Args:
        model: the model `init_continuous_batching` or `generate_batch` was called on.
        with_items (`bool`, *optional*, defaults to `True`): whether the request holds images (or videos).

    Raises:
        `TypeError`: the model is not a vlmprep drop-in.
        `ValueError`: the family needs attention or positions the engine does not build (see the message).
    """
    from ..generation.mixin import VisionPrepGenerationMixin  # the drop-ins' base, which lists the batching mixin

    if not isinstance(model, VisionPrepGenerationMixin):
        raise TypeError(
            f"Continuous batching with images needs a vlmprep drop-in model, got {type(model).__name__}. Load the "
            "model with vlmprep's class, e.g. `vlmprep.LlavaForConditionalGeneration.from_pretrained(...)`."
        )
    facts = model.vision_facts
    name = type(model).__name__
    layer_types = set(getattr(model.config.get_text_config(), "layer_types", None) or ())
    other_layers = sorted(layer_types - {"full_attention", "sliding_attention"})
    if other_layers:
        raise ValueError(
            f"{name}'s decoder has {other_layers} layers, which transformers' paged cache does not hold (it keeps "
            "attention layers only), also for text. Use `generate` for this model."
        )
    # PaliGemma's prefix is bidirectional in every prompt, images or not
    if facts.bidirectional == "prefix" or (with_items and facts.bidirectional is not None):
        raise ValueError(
            f"{name} attends bidirectionally inside each image block (`{facts.bidirectional}`), but the engine's "
            "paged attention masks every packed request causally and may cut a prompt inside a block, which would "
            "give wrong answers. Continuous batching with images supports causal families only so far; use "
            "`generate` (with `prefill_chunk_size` for long prompts) for this model."
        )
