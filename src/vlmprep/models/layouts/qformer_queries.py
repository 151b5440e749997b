"""The Q-Former layout: an item is one fixed-resolution image (or video), whose Q-Former's `num_query_tokens` learned
queries, projected, fill one run of placeholders (BLIP-2, InstructBLIP, InstructBLIP-Video).

Besides the counts, these families share how transformers runs them: their own `generate` encodes the items and hands
input embeddings to the language model's `generate`, and their forward needs the pixels on every call. The drop-ins
run vlmprep's `generate` on the whole model instead, so their forward must also take calls that carry no item
(decoding steps, prefill chunks of text): `QFormerQueriesLayout.prepare_query_forward` turns such a call into one
upstream's forward takes. Each family's `forward` is `upstream_forward(<its transformers class>)`: upstream's own
parameters, in upstream's order, bound as upstream binds them, run by `QFormerQueriesLayout.run_upstream_forward`;
what `generate` adds (`cache`, `position_ids`, `use_cache`) comes through its keyword arguments, which upstream's
forward hands to the language model. Checkpoints whose language model is an encoder-decoder (Flan-T5) are refused
(`config_refusal`): their encoder takes the items and the prompt together, there is no decoder-only prefill to
prepare.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedConfig
from transformers.modeling_outputs import BaseModelOutputWithPooling

from ...generation import VisionFacts
from ...generation.hooks import FamilyHooks
from ...generation.validation import check_companion_input
from ..base import keeps_upstream_interface
from . import Layout

# Every Q-Former family: a fixed count per item (the learned queries), nothing per item besides the pixels.
QFORMER_FACTS = VisionFacts(tokens_per_image_attr="num_query_tokens", per_image_keys=())


@dataclass
class QueryRows(BaseModelOutputWithPooling):
    """Feature rows in the container the Q-Former families' forward reads (`pooler_output`, and the vision and
    Q-Former outputs, which vlmprep's prepared rows do not carry).

    Args:
        vision_outputs (`BaseModelOutputWithPooling`, *optional*): the vision tower's output; `None` here.
        qformer_outputs (`ModelOutput`, *optional*): the Q-Former's output; `None` here.
    """

    vision_outputs: Any = None
    qformer_outputs: Any = None


class QFormerQueriesLayout(FamilyHooks):
    """An item is one image (or video) whose Q-Former queries fill one run of `num_query_tokens` placeholders."""

    layout = Layout(
        "qformer_queries",
        "an image (or video) is one run of the Q-Former's `num_query_tokens` projected queries; forwards without items taken, encoder-decoder language models refused",
    )
    # Upstream's `generate` takes `pixel_values` first; vlmprep's `generate` prepares them from the prompt's ids.
    main_input_name = "input_ids"
    # Upstream's forward names none of them and hands them to the language model, as vlmprep's `generate` passes them
    language_model_kwargs = ("cache", "position_ids", "use_cache", "logits_to_keep")

    @classmethod
    def config_refusal(cls, config: PreTrainedConfig) -> str | None:
        """Why this config has no drop-in (an encoder-decoder language model: Flan-T5), or `None`.

        Args:
            config (`PreTrainedConfig`): the model's config.

        Returns:
            `str` or `None`
        """
        if config.use_decoder_only_language_model:
            return None
        upstream = type(config).__name__.replace("Config", "ForConditionalGeneration")
        return (
            f"this checkpoint's language model ({config.text_config.model_type}) is an encoder-decoder, whose encoder "
            "takes the items and the prompt together: there is no decoder-only prefill to prepare. Load it with "
            f"`transformers.{upstream}` (`vlmprep.AutoModelForImageTextToText` does)."
        )

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int | None:
        """Placeholders per item: `num_query_tokens` per image, and per frame of a video (`pixel_values` of shape
        `(videos, frames, C, H, W)`: each frame's queries, in frame order, fill one run).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs.
            modality (`str`, *optional*, defaults to `"image"`): whose items to count tokens of.

        Returns:
            `int` or `None` (a video without its pixels: every run one video).
        """
        queries = int(self.config.num_query_tokens)
        if modality == "image":
            return queries
        pixel_values = model_kwargs.get("pixel_values")
        if not isinstance(pixel_values, torch.Tensor) or pixel_values.ndim != 5:
            return None
        return queries * pixel_values.shape[1]

    def continuous_batching_refusal(self) -> str:
        """Why transformers' continuous-batching engine does not run these families (`vlmprep.batching.support`).

        Returns:
            `str`
        """
        return (
            "the Q-Former families are not adapted to the continuous-batching engine yet (their per-item instructions "
            "and their forward's decoding steps without items are not carried through its paged steps)."
        )

    def caption_prompt(self, pixel_values: torch.Tensor, input_ids: torch.Tensor | None, kwargs: dict) -> dict:
        """The keyword arguments of vlmprep's `generate` for upstream's signature: without a prompt, as upstream, each
        item is captioned from its placeholders followed by the decoder's BOS token; every token is attended unless
        a mask says otherwise (transformers' default would mask the decoder's pad id, which upstream never does).
        The language model's `position_ids` are numbered from the mask, as its own `generate` (upstream's) does: the
        forward has upstream's parameters, which do not name them, so `generate` would not make them. Decoding always
        caches, as upstream's (its language model's `generate` from input embeddings ignores `use_cache=False`), so
        the hidden states and attentions returned per step are the same.

        Args:
            pixel_values (`torch.Tensor`, *optional*): the items' pixels.
            input_ids (`torch.Tensor`, *optional*): the prompt.
            kwargs (`dict`): the other arguments of the call (`attention_mask`, `inputs_embeds`, generation options).

        Returns:
            `dict`: the arguments, `input_ids`, `attention_mask` and `position_ids` included.
        """
        if kwargs.pop("interpolate_pos_encoding", False):
            raise ValueError(
                "`interpolate_pos_encoding=True` is not supported by the vlmprep drop-in: resize the images to the "
                "vision tower's `image_size` (the processor does), or use transformers' class."
            )
        if input_ids is None and kwargs.get("inputs_embeds") is None and pixel_values is not None:
            modality = self.vision_facts.modalities[0]
            count = self.item_token_counts({"pixel_values": pixel_values}, modality=modality.name)
            prompt = [modality.placeholder_id(self.config)] * count + [self.config.text_config.bos_token_id]
            input_ids = torch.tensor([prompt], device=pixel_values.device).repeat(pixel_values.shape[0], 1)
        if pixel_values is not None:
            kwargs["pixel_values"] = pixel_values
        if kwargs.get("attention_mask") is None and input_ids is not None:
            kwargs["attention_mask"] = torch.ones_like(input_ids)
        kwargs["use_cache"] = True
        mask = kwargs.get("attention_mask")
        if mask is None:
            kwargs.pop("attention_mask", None)
        elif kwargs.get("position_ids") is None and mask.ndim == 2:
            # A left-padded row's first real token is its position 0
            kwargs["position_ids"] = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
        return {"input_ids": input_ids, **kwargs}

    def prepare_query_forward(self, inputs: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Upstream's forward inputs for a call that may carry no item (a decoding step of `generate`, a text chunk).

        A call with prepared rows gets them in the container upstream reads; a call without (a decoding step, a text
        chunk) gets no rows and ids that match no placeholder, its tokens embedded as they are (a generated
        placeholder id stays the token it is, as in upstream's `generate`, which decodes with the language model
        alone; `generate` refuses a prompt whose placeholders have no item before any forward). `generate` drops an
        all-ones mask, after which upstream's forward would attend to this call's tokens only: the mask over the
        cache and the call is restored. Every upstream parameter stays, `None` included (upstream's forward requires
        `pixel_values` and `input_ids`, which are `None` in a call from `inputs_embeds`).

        Args:
            inputs (`dict[str, Any]`): upstream's named parameters, as the call gave them.
            kwargs (`dict[str, Any]`): the call's other keyword arguments (`cache`, `position_ids`, ...), which
                upstream's forward hands to the language model.

        Returns:
            `dict[str, Any]`: upstream's named parameters for this call.
        """
        encoded = dict(inputs.get("mm_encoder_outputs") or {})
        modality = self.vision_facts.modalities[0].name  # a Q-Former family has one modality: images or videos
        if inputs.get("input_ids") is None and inputs.get("inputs_embeds") is None:
            raise ValueError(
                f"{type(self).__name__}'s forward needs the prompt: pass `input_ids` (or `inputs_embeds`), with "
                f"each {modality} a run of its placeholders."
            )
        if inputs.get("pixel_values") is None:
            rows = encoded.get(modality)
            if rows is None:
                if inputs.get("inputs_embeds") is None:
                    inputs["inputs_embeds"] = self.get_input_embeddings()(inputs["input_ids"])
                embeds = inputs["inputs_embeds"]
                rows = QueryRows(pooler_output=embeds.new_zeros((0,)))
                inputs["input_ids"] = torch.full(embeds.shape[:2], -1, device=embeds.device)
            if not hasattr(rows, "qformer_outputs"):  # vlmprep's prepared rows
                rows = QueryRows(pooler_output=rows.pooler_output, last_hidden_state=rows.pooler_output)
            encoded[modality] = rows
            inputs["mm_encoder_outputs"] = encoded
        if inputs.get("attention_mask") is None:
            tokens = inputs["input_ids"] if inputs.get("inputs_embeds") is None else inputs["inputs_embeds"]
            cache = kwargs.get("cache")
            # transformers' paged cache (continuous batching, refused for these families) has no sequence length
            past = cache.get_seq_length() if cache is not None and hasattr(cache, "get_seq_length") else 0
            shape = (tokens.shape[0], past + tokens.shape[1])
            inputs["attention_mask"] = torch.ones(shape, dtype=torch.long, device=tokens.device)
        return inputs

    def run_upstream_forward(self, inputs: dict[str, Any], kwargs: dict[str, Any]):
        """Upstream's forward on a call that may carry no item (`prepare_query_forward`); what a family's `forward`
        (`upstream_forward`) runs.

        Args:
            inputs (`dict[str, Any]`): upstream's named parameters, as the call gave them.
            kwargs (`dict[str, Any]`): the call's other keyword arguments, handed to the language model by upstream.

        Returns:
            upstream's output, with the language model's `cache` at the top (`with_language_model_cache`).
        """
        inputs = self.prepare_query_forward(inputs, kwargs)
        # The transformers class's forward: the next one after this layout in the drop-in's method order
        return with_language_model_cache(super().forward(**inputs, **kwargs))

    def generate(
        self,
        pixel_values: torch.Tensor | None = None,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        **kwargs,
    ):
        """Upstream's `generate` signature (`pixel_values` first), run by vlmprep's `generate`.

        Args:
            pixel_values (`torch.Tensor`, *optional*): `(num_images, C, H, W)`.
            input_ids (`torch.LongTensor`, *optional*):
                the prompt, each image a run of `num_query_tokens` placeholders; without it, as upstream, each image
                is captioned from its placeholders followed by the decoder's BOS token.
            attention_mask (`torch.LongTensor`, *optional*): the prompt's mask.
            kwargs: what vlmprep's `generate` takes (generation options, `prefix_cache`, `cache_salt`, ...);
                `interpolate_pos_encoding` only `False`.

        Returns:
            What transformers' `generate` returns: the prompt's ids followed by the generated ones.
        """
        inputs = self.caption_prompt(pixel_values, input_ids, {"attention_mask": attention_mask, **kwargs})
        return super().generate(inputs.pop("input_ids"), **inputs)


def upstream_forward(upstream: type) -> Callable:
    """A Q-Former family's drop-in `forward`: upstream's parameters, in upstream's order, with its annotations.

    The call is bound as upstream's signature binds it; upstream's named parameters go to
    `QFormerQueriesLayout.run_upstream_forward` (those upstream requires, the pixels and the prompt, may be missing: a
    decoding step or a prefill chunk of text carries no item) and its other keyword arguments to the language model,
    as upstream hands them on.

    Args:
        upstream (`type`): the transformers class (`transformers.Blip2ForConditionalGeneration`, ...).

    Returns:
        `Callable`: the `forward` to set on the drop-in class: its output is upstream's (`labels` give upstream's loss),
        with the language model's `cache` at the top.
    """
    signature = inspect.signature(upstream.forward)
    parameters = signature.parameters
    named = [name for name in list(parameters)[1:] if parameters[name].kind is not inspect.Parameter.VAR_KEYWORD]
    rest = next(name for name in parameters if parameters[name].kind is inspect.Parameter.VAR_KEYWORD)

    @keeps_upstream_interface(upstream.forward)
    def forward(self, *args, **kwargs):
        call = signature.bind_partial(self, *args, **kwargs)
        call.apply_defaults()
        inputs = {name: call.arguments.get(name) for name in named}
        return self.run_upstream_forward(inputs, dict(call.arguments[rest]))

    forward.__doc__ = (
        f"`transformers.{upstream.__name__}.forward`, which also takes calls without an item (decoding steps, prefill "
        "chunks of text): `vlmprep.models.layouts.qformer_queries.upstream_forward`."
    )
    return forward


def check_instructions(model_kwargs: dict[str, Any], num_items: int | None, modality: str = "image") -> None:
    """Raise unless the Q-Former's instruction (`qformer_input_ids`, one row per item) comes with the items.

    InstructBLIP's Q-Former reads each item together with its prompt's text, so an item's features depend on it: the
    instruction is an input of the item, encoded and hashed with it.

    Args:
        model_kwargs (`dict[str, Any]`): the call's inputs.
        num_items (`int`, *optional*): how many items of `modality` the call's pixels hold.
        modality (`str`, *optional*, defaults to `"image"`): the items' modality.
    """
    instructions, mask = model_kwargs.get("qformer_input_ids"), model_kwargs.get("qformer_attention_mask")
    if num_items is None:
        return
    if instructions is None or instructions.ndim != 2 or instructions.shape[0] != num_items:
        shape = None if instructions is None else tuple(instructions.shape)
        raise ValueError(
            f"The Q-Former reads each {modality} with its instruction, but `qformer_input_ids` has shape {shape} for "
            f"{num_items} {modality}(s): pass one row of Q-Former ids per {modality}, in prompt order (the processor "
            f"returns one per prompt, with its {modality})."
        )
    entry = "one mask entry per id"
    check_companion_input(
        mask, "qformer_attention_mask", instructions.shape, "qformer_input_ids", entry, required=False
    )


def with_language_model_cache(output):
    """Upstream's output with the language model's `cache`, `hidden_states` and `attentions` at the top, where
    `generate` reads them (upstream's own `generate` reads them from the language model's output).

    Args:
        output (`ModelOutput`): the family's forward output, with `language_model_outputs`.

    Returns:
        `ModelOutput`: the same output, those fields added (a tuple, from `return_dict=False`, as it is).
    """
    if not hasattr(output, "language_model_outputs"):
        return output
    for name in ("cache", "hidden_states", "attentions"):
        value = getattr(output.language_model_outputs, name, None)
        if value is not None:
            output[name] = value
    return output


class InstructedQueriesLayout(QFormerQueriesLayout):
    """The Q-Former layout of the families whose Q-Former also reads each item's instruction (InstructBLIP and
    InstructBLIP-Video): upstream's `generate` signature, the instruction passed with the item."""

    def generate(
        self,
        pixel_values: torch.Tensor | None = None,
        qformer_input_ids: torch.LongTensor | None = None,
        qformer_attention_mask: torch.LongTensor | None = None,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        **kwargs,
    ):
        """Upstream's `generate` signature (`pixel_values` first), run by vlmprep's `generate`.

        Args:
            pixel_values (`torch.Tensor`, *optional*): `(num_images, C, H, W)` or `(num_videos, frames, C, H, W)`.
            qformer_input_ids (`torch.LongTensor`, *optional*): `(num_items, length)`, each item's instruction.
            qformer_attention_mask (`torch.LongTensor`, *optional*): their mask.
            input_ids (`torch.LongTensor`, *optional*):
                the prompt, each image a run of `num_query_tokens` placeholders (a video: `num_query_tokens * frames`);
                without it, as upstream, each item is captioned from its placeholders followed by the decoder's BOS
                token.
            attention_mask (`torch.LongTensor`, *optional*): the prompt's mask.
            kwargs: what vlmprep's `generate` takes; `interpolate_pos_encoding` only `False`.

        Returns:
            What transformers' `generate` returns: the prompt's ids followed by the generated ones.
        """
        instructions = {"qformer_input_ids": qformer_input_ids, "qformer_attention_mask": qformer_attention_mask}
        kwargs.update({key: value for key, value in instructions.items() if value is not None})
        return super().generate(pixel_values, input_ids, attention_mask, **kwargs)
