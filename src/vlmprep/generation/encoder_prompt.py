"""Items in an encoder-decoder's prompt (Florence-2, T5Gemma 2): features placed in the encoder's input embeddings.

Upstream's `generate` runs the whole encoder of an encoder-decoder once per call, the vision tower included: every
task prompt on the same image (`<CAPTION>`, `<OD>`, `<OCR>`, ...) encodes that image again. Here the prompt is
planned as any other (spans, counts, checks), the features come from the encoder cache or one batched tower call, and
are scattered into the embeddings of the encoder's placeholders, as upstream's encoder forward does with its own
features. The text encoder then runs on those embeddings through upstream's own encoder step, so a new prompt on a
cached image runs only the text side of the encoder. The decoder and its cache are left to transformers: the decoder
cross-attends to the whole encoder output, so no decoder KV is shared between prompts.
"""

from __future__ import annotations

from typing import Any

import torch

from .plan import plan_prompt
from .prepared import PreparedItems, containers_of


def cross_attention_cached(model, model_kwargs: dict[str, Any]) -> bool:
    """Whether the call continues a caller's decoder cache that already holds the cross-attention states, and passes
    no pixel inputs (a previous `generate`'s cache, continued with its sequences as `decoder_input_ids`).

    The decoder then reads the cached states, never this call's encoder output: upstream's encoder step runs the
    prompt without its images (placeholders embedded as text) and the answer is still the images'. Planning that prompt
    here would refuse its placeholders for having no pixels.

    Args:
        model: the drop-in model, an encoder-decoder.
        model_kwargs (`dict[str, Any]`): the call's inputs.

    Returns:
        `bool`
    """
    cross_attention = getattr(model_kwargs.get("cache"), "cross_attention_cache", None)
    if cross_attention is None or cross_attention.get_seq_length() == 0:
        return False
    pixel_keys = (key for modality in model.vision_facts.modalities for key in modality.pixel_keys)
    return all(model_kwargs.get(key) is None for key in pixel_keys)


def items_in_encoder_prompt(model, model_input_name: str | None, model_kwargs: dict[str, Any]) -> bool:
    """Whether `generate`'s input preparation encodes an encoder-decoder's prompt here: the model is one, its prompt
    is given as `input_ids`, and the caller passed no `encoder_outputs` (then upstream's step keeps them as they are)
    nor a cache holding the cross-attention states without pixels (`cross_attention_cached`: upstream's step runs).

    Args:
        model: the drop-in model.
        model_input_name (`str`, *optional*): the name of the prompt's input (`"input_ids"`, `"inputs_embeds"`).
        model_kwargs (`dict[str, Any]`): the call's inputs.

    Returns:
        `bool`
    """
    return (
        bool(model.config.is_encoder_decoder)
        and model_input_name == "input_ids"
        and model_kwargs.get("encoder_outputs") is None
        and not cross_attention_cached(model, model_kwargs)
    )


def prepare_encoder_with_items(
    model,
    inputs_tensor: torch.Tensor,
    model_kwargs: dict[str, Any],
    generation_config,
    salt: str | None = None,
    hints: dict | None = None,
    assistant_encodes: bool = False,
) -> dict[str, Any]:
    """Encode an encoder-decoder's prompt with its items' features taken once per distinct item.

    Args:
        model: the drop-in model, an encoder-decoder (`config.is_encoder_decoder`).
        inputs_tensor (`torch.Tensor` of shape `(batch_size, prompt_length)`): the encoder's `input_ids`.
        model_kwargs (`dict[str, Any]`): the call's inputs; the pixel inputs leave them, `encoder_outputs` is added.
        generation_config: the call's generation config.
        salt (`str`, *optional*): the call's cache salt.
        hints (`dict`, *optional*): a caller's names for its items (`vlmprep.cache.hash_hints`).
        assistant_encodes (`bool`, *optional*, defaults to `False`): whether an `assistant_model` encodes the prompt
            too: the item inputs then stay in the kwargs (see below).

    Returns:
        `dict[str, Any]`: `model_kwargs`, with upstream's `encoder_outputs`.
    """
    # The caller's cache is the decoder's: the encoder's prompt is always encoded whole, from its first token.
    decoder_cache = model_kwargs.pop("cache", None)
    try:
        supplied = model_kwargs.pop("mm_encoder_outputs", None)
        plan = plan_prompt(model, inputs_tensor, model_kwargs, generation_config, salt, None, supplied, hints)
    finally:
        if decoder_cache is not None:
            model_kwargs["cache"] = decoder_cache
    features, _ = plan.encoder.features(plan.needed_items(), plan.item_hashes, plan.supplied)
    prepared = PreparedItems(spans=plan.spans, features=features, **containers_of(model, plan.spans))

    inputs_embeds = model.get_input_embeddings()(inputs_tensor)  # (batch_size, prompt_length, hidden_size)
    for modality in model.vision_facts.modalities:
        rows = prepared.rows_between(0, plan.end, modality.name)  # (placeholders, hidden_size), row-major order
        if rows is None:
            continue
        placed = torch.zeros(inputs_tensor.shape, dtype=torch.bool, device=inputs_tensor.device)
        for span in plan.spans:
            if span.modality == modality.name:
                placed[span.row, span.start : span.end] = True
        # As upstream's encoder forward: `masked_scatter` fills the placeholders in row-major order
        inputs_embeds = inputs_embeds.masked_scatter(placed.unsqueeze(-1), rows.to(inputs_embeds))
    item_inputs = {}
    for modality in model.vision_facts.modalities:
        for key in (*modality.item_keys, *plan.encoder.encoder_argument_names(modality.name)):
            if key in model_kwargs:  # the encoder reads the embeddings: its tower must not run again
                item_inputs[key] = model_kwargs.pop(key)

    # Upstream's own encoder step (Florence-2's override calls it the same way), on the embeddings
    model_kwargs["inputs_embeds"] = inputs_embeds
    model_kwargs = model._prepare_text_encoder_decoder_kwargs_for_generation(
        inputs_tensor=None,
        model_kwargs=model_kwargs,
        model_input_name="input_ids",  # given as `inputs_embeds` (`None` ids), as Florence-2's own override does
        generation_config=generation_config,
    )
    model_kwargs.pop("inputs_embeds", None)
    if assistant_encodes:
        # An assistant model encodes the prompt itself from a copy of these kwargs (transformers' candidate generator
        # hands it no `encoder_outputs`): it needs the item inputs back; this model's forwards, given
        # `encoder_outputs`, never run the tower on them.
        model_kwargs.update(item_inputs)
    return model_kwargs


def prefill_decoder_in_chunks(model, prefill, input_ids: torch.Tensor, generation_config, model_kwargs: dict):
    """An encoder-decoder's chunked prefill: the decoder's prompt in chunks, the encoder's attention mask whole.

    Upstream's chunked prefill cuts `attention_mask` to each chunk's end as a decoder-only model's, but an
    encoder-decoder's is the encoder's: a left-padded row's padding then reaches the decoder's cross-attention (or the
    shapes clash, T5Gemma 2). Here each chunk runs through upstream's unchunked prefill, with the decoder's own mask up
    to the chunk's end.

    Args:
        model: the drop-in model, an encoder-decoder.
        prefill: upstream's `_prefill`, bound to the model.
        input_ids (`torch.Tensor` of shape `(batch_size, decoder_length)`): the decoder's prompt.
        generation_config: the call's generation config (its `prefill_chunk_size` is set).
        model_kwargs (`dict`): the call's inputs, `encoder_outputs` and the decoder's cache included.

    Returns:
        The last chunk's forward output.
    """
    chunk_size = generation_config.prefill_chunk_size
    decoder_mask = model_kwargs.get("decoder_attention_mask")
    generation_config.prefill_chunk_size = None
    try:
        for start in range(0, input_ids.shape[1], chunk_size):
            end = min(start + chunk_size, input_ids.shape[1])
            if decoder_mask is not None:
                model_kwargs["decoder_attention_mask"] = decoder_mask[:, :end]
            outputs = prefill(input_ids[:, start:end], generation_config, model_kwargs, is_first_iteration=True)
            model_kwargs["cache"] = outputs.cache
    finally:
        generation_config.prefill_chunk_size = chunk_size
        if decoder_mask is not None:
            model_kwargs["decoder_attention_mask"] = decoder_mask
    return outputs
