"""Text-only loading of multimodal checkpoints: the text decoder alone, vision weights never read.

transformers maps `AutoModelForCausalLM` on a multimodal checkpoint (e.g. `gemma3`) to the whole conditional model,
so the vision tower and projector are read and kept in memory even when only text is generated, and most VLM
families are not mapped at all. Here the checkpoint's text config builds the decoder's own causal-LM class
(`Gemma3ForCausalLM`, `LlamaForCausalLM`, ...) and only the decoder's tensors are read from the safetensors files,
one tensor at a time with `safe_open`, after renaming the checkpoint's keys to the decoder's. A shard that holds
only vision or projector tensors is never opened (nor downloaded, for a Hub repo).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import torch
import transformers
from safetensors import SafetensorError, safe_open
from transformers import CONFIG_MAPPING, AutoConfig, GenerationConfig, PreTrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, cached_file

from ..models.registry import FAMILY_SPECS
from ..models.text_only_rules import TextOnlyFamily
from .logit_scale import multimodal_class_scales_logits

__all__ = [
    "TEXT_ONLY_FAMILIES",
    "AutoModelForCausalLM",
    "TextOnlyFamily",
    "load_text_decoder",
    "text_decoder_config",
]

# kwargs that locate files; they are used here to resolve the config and weights, and are not forwarded to the
# decoder's `from_pretrained`, which is called without a path.
_HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "proxies", "revision", "subfolder", "token")


# model_type -> text-only rule, for the model types whose registry entry (`vlmprep.models.registry`) has one: the
# image-text-to-text families whose text config has a standalone causal-LM class in `AutoModelForCausalLM`'s mapping.
# Each is tested (tests/loading/test_text_only.py) for logits equal to the VLM's text-only forward. Not covered:
# GLM-4V, ... (their `*_text` configs have no causal-LM class), Mllama (cross-attention decoder), Gemma3n/Gemma4,
# Llama4, Qwen3.5 (transformers' own mapping handles them).
TEXT_ONLY_FAMILIES: Mapping[str, TextOnlyFamily] = MappingProxyType(
    {model_type: spec.text_only for model_type, spec in FAMILY_SPECS.items() if spec.text_only is not None}
)


def _is_text_only_family(config: Any) -> bool:
    return isinstance(config, PreTrainedConfig) and config.model_type in TEXT_ONLY_FAMILIES


def text_decoder_config(config: PreTrainedConfig) -> PreTrainedConfig:
    """The config the text decoder of a multimodal model is built from.

    A copy of the text config, with `tie_word_embeddings` taken from the multimodal config: the conditional model
    ties its `lm_head` according to its own (top-level) flag, which can differ from the text config's (Mistral3,
    InternVL: top-level `True`, text `False`, and no `lm_head` in the checkpoint); without a top-level flag, the text
    config's own.

    Args:
        config (`PreTrainedConfig`): the multimodal model's config (one with a `text_config`).

    Returns:
        `PreTrainedConfig`: the decoder's config, e.g. a `Gemma3TextConfig` for a `Gemma3Config`.
    """
    text_config = config.get_text_config(decoder=True)
    if text_config is config:
        raise ValueError(f"Config of model type {config.model_type!r} has no separate text config.")
    family = TEXT_ONLY_FAMILIES.get(config.model_type)
    if family is not None and family.decoder_model_type is not None:
        decoder_config = _carried_over_config(text_config, family.decoder_model_type)
    else:
        decoder_config = copy.deepcopy(text_config)
    # A multimodal config without the flag (BLIP-2) holds a whole causal LM, tied by its text config's own flag.
    own_flag = getattr(text_config, "tie_word_embeddings", False)
    decoder_config.tie_word_embeddings = getattr(config, "tie_word_embeddings", own_flag)
    for name, value in family.decoder_config_overrides if family is not None else ():
        setattr(decoder_config, name, value)
    # The decoder scales its logits; the multimodal class, depending on the release, may not (`logit_scale.py`)
    probe = family.logit_scale_probe if family is not None else ()
    if probe and not multimodal_class_scales_logits(config.model_type, probe):
        decoder_config.logit_scale = 1.0
    if decoder_class_of(config, decoder_config) is None:
        raise ValueError(
            f"Text config {type(decoder_config).__name__} of {config.model_type!r} has no causal-LM class in "
            "transformers' AutoModelForCausalLM mapping, so its decoder cannot be loaded on its own."
        )
    return decoder_config


def decoder_class_of(config: PreTrainedConfig, decoder_config: PreTrainedConfig) -> type | None:
    """The causal-LM class of a multimodal model's decoder config, from `AutoModelForCausalLM`'s mapping.

    Listed under the decoder config's type, or under the multimodal config's type when that class takes the decoder
    config (Llama 3.2 Vision: `mllama` maps to `MllamaForCausalLM`, whose config is `MllamaTextConfig`).

    Args:
        config (`PreTrainedConfig`): the multimodal model's config.
        decoder_config (`PreTrainedConfig`): its decoder's config (`text_decoder_config`).

    Returns:
        `type` or `None`: the class, or `None` when the mapping lists none.
    """
    if type(decoder_config) in MODEL_FOR_CAUSAL_LM_MAPPING:
        return MODEL_FOR_CAUSAL_LM_MAPPING[type(decoder_config)]
    by_multimodal_type = MODEL_FOR_CAUSAL_LM_MAPPING.get(type(config), None)
    if by_multimodal_type is not None and by_multimodal_type.config_class is type(decoder_config):
        return by_multimodal_type
    return None


# Keys of the text config that are about the file or the class, not the decoder's computation.
_NOT_CARRIED_OVER = ("model_type", "architectures", "transformers_version", "_name_or_path", "auto_map")
_MROPE_KEYS = ("mrope_section", "mrope_interleaved")


def _carried_over_config(text_config: PreTrainedConfig, model_type: str) -> PreTrainedConfig:
    """The text config's attributes in a config of `model_type`, with a 1D rope (see `text_only_rules.QWEN2_DECODER`)."""
    attributes = {key: value for key, value in text_config.to_dict().items() if key not in _NOT_CARRIED_OVER}
    rope_parameters = dict(attributes.get("rope_parameters") or {})
    for key in _MROPE_KEYS:
        rope_parameters.pop(key, None)
    # Old checkpoints say `"type": "mrope"`; transformers reads it as the default rope with mrope sections.
    if rope_parameters.get("type") == "mrope":
        del rope_parameters["type"]
    if rope_parameters.get("rope_type", "mrope") == "mrope":
        rope_parameters["rope_type"] = "default"
    attributes["rope_parameters"] = rope_parameters
    return CONFIG_MAPPING[model_type](**attributes)


def _weights_name(name: str, variant: str | None) -> str:
    # Same naming as transformers' `_add_variant`: model.safetensors -> model.<variant>.safetensors
    if variant is None:
        return name
    stem, ext = name.rsplit(".", 1)
    return f"{stem}.{variant}.{ext}"


def _checkpoint_weight_map(
    path: str | os.PathLike, variant: str | None, hub_kwargs: dict
) -> tuple[dict[str, str], Callable[..., str | None]]:
    """Checkpoint key -> file name, and a function resolving a file name to a local path.

    For a sharded checkpoint the map comes from the index, so no shard is opened (or downloaded) to list keys.
    """

    def resolve(filename: str, required: bool = True) -> str | None:
        return cached_file(path, filename, _raise_exceptions_for_missing_entries=required, **hub_kwargs)

    index_file = resolve(_weights_name(SAFE_WEIGHTS_INDEX_NAME, variant), required=False)
    if index_file is not None:
        try:
            with open(index_file, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise OSError(f"Unable to read the safetensors index {index_file}: {e}") from e
        return dict(weight_map), resolve

    weights_name = _weights_name(SAFE_WEIGHTS_NAME, variant)
    weights_file = resolve(weights_name, required=False)
    if weights_file is None:
        raise OSError(
            f"{path} has neither {weights_name} nor {_weights_name(SAFE_WEIGHTS_INDEX_NAME, variant)}: text-only "
            "loading reads safetensors checkpoints only (convert .bin weights with `save_pretrained` first)."
        )
    try:
        with safe_open(weights_file, framework="pt") as f:
            keys = list(f.keys())
    except (OSError, SafetensorError) as e:
        raise OSError(f"Unable to read safetensors file {weights_file}: {e}") from e
    return dict.fromkeys(keys, weights_name), resolve


def _read_decoder_state_dict(
    path: str | os.PathLike, family: TextOnlyFamily, variant: str | None, hub_kwargs: dict
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Reads the decoder's tensors only; returns the state dict (decoder names) and decoder -> checkpoint names."""
    weight_map, resolve = _checkpoint_weight_map(path, variant, hub_kwargs)

    # 1. rename: checkpoint key -> decoder key, for decoder tensors only
    checkpoint_names: dict[str, str] = {}
    for checkpoint_key in weight_map:
        decoder_key = family.decoder_key(checkpoint_key)
        if decoder_key is None:
            continue
        if decoder_key in checkpoint_names:
            raise ValueError(
                f"Checkpoint {path} holds decoder tensor {decoder_key!r} twice: as "
                f"{checkpoint_names[decoder_key]!r} and {checkpoint_key!r}."
            )
        checkpoint_names[decoder_key] = checkpoint_key

    # 2. group by file, so that each file holding decoder tensors is opened once and the others never
    by_file: dict[str, list[str]] = {}
    for decoder_key, checkpoint_key in checkpoint_names.items():
        by_file.setdefault(weight_map[checkpoint_key], []).append(decoder_key)

    # 3. read tensor by tensor: `get_tensor` of a key never touches the bytes of the other keys
    state_dict: dict[str, torch.Tensor] = {}
    for filename, decoder_keys in by_file.items():
        local_file = resolve(filename)
        try:
            with safe_open(local_file, framework="pt") as f:
                for decoder_key in decoder_keys:
                    state_dict[decoder_key] = f.get_tensor(checkpoint_names[decoder_key])
        except (OSError, SafetensorError) as e:
            raise OSError(f"Unable to read safetensors file {local_file}: {e}") from e
    return state_dict, checkpoint_names


def _raise_on_key_mismatch(loading_info: dict, checkpoint_names: dict[str, str], path: str | os.PathLike) -> None:
    missing = sorted(loading_info.get("missing_keys", []))
    unexpected = sorted(loading_info.get("unexpected_keys", []))
    mismatched = [str(item) for item in loading_info.get("mismatched_keys", [])]
    if not (missing or unexpected or mismatched):
        return
    lines = [f"Checkpoint {path} does not match its text decoder; refusing to return randomly initialized weights."]
    if missing:
        lines.append(f"Missing decoder keys: {missing}")
    if unexpected:
        named = [f"{key} (checkpoint key {checkpoint_names.get(key, key)!r})" for key in unexpected]
        lines.append(f"Unexpected decoder keys: {named}")
    if mismatched:
        lines.append(f"Shape mismatches: {mismatched}")
    raise ValueError("\n".join(lines))


def load_text_decoder(pretrained_model_name_or_path: str | os.PathLike, *model_args, **kwargs) -> PreTrainedModel:
    """Loads the text decoder of a multimodal checkpoint as its causal-LM class, without reading vision weights.

    The decoder class is `AutoModelForCausalLM`'s mapping for the checkpoint's text config (Gemma3 ->
    `Gemma3ForCausalLM`, PaliGemma -> `GemmaForCausalLM`, LLaVA -> `LlamaForCausalLM`, ...). Only the decoder's
    tensors are read, renamed to the decoder's keys, and handed to the decoder's `from_pretrained` (with `state_dict=`
    and no path), so `dtype`, `attn_implementation`, `device_map`, ... are handled by transformers itself.

    Args:
        pretrained_model_name_or_path (`str` or `os.PathLike`):
            A local directory (or Hub repo id) with a `config.json` that has a `text_config`, and safetensors weights:
            `model.safetensors` or shards listed in `model.safetensors.index.json`.
        model_args:
            Positional arguments for the decoder's `__init__`, as in transformers' `from_pretrained`.
        kwargs:
            `config` (the multimodal config, instead of reading `config.json`), `variant`, `trust_remote_code`,
            hub arguments (`revision`, `cache_dir`, `token`, ...), `output_loading_info`, and anything the decoder's
            `from_pretrained` accepts.

    Returns:
        `PreTrainedModel`: the decoder, in eval mode, with the checkpoint's generation config when it has one (a
        `(model, loading_info)` tuple with `output_loading_info=True`).

    Raises:
        `ValueError`: the model type is not in `TEXT_ONLY_FAMILIES`, or the checkpoint lacks decoder weights, has
            extra decoder-side keys, or has shape mismatches (never returns random weights).
        `OSError`: no safetensors weights, or a weights file that cannot be read (the message names the file).
    """
    config = kwargs.pop("config", None)
    hub_kwargs = {name: kwargs.pop(name) for name in _HUB_KWARGS if name in kwargs}
    variant = kwargs.pop("variant", None)
    trust_remote_code = kwargs.pop("trust_remote_code", None)
    output_loading_info = kwargs.pop("output_loading_info", False)
    _check_weights_format(kwargs)
    config, family = _text_only_config(pretrained_model_name_or_path, config, trust_remote_code, hub_kwargs)
    decoder_config = text_decoder_config(config)
    decoder_class = decoder_class_of(config, decoder_config)

    state_dict, checkpoint_names = _read_decoder_state_dict(pretrained_model_name_or_path, family, variant, hub_kwargs)
    if not state_dict:
        raise ValueError(
            f"Checkpoint {pretrained_model_name_or_path} has no text-decoder tensors under the prefixes "
            f"{[source for source, _ in family.key_rules]} expected for {config.model_type!r}."
        )

    # A path of None makes transformers build the decoder from `config` and load `state_dict` through its usual
    # machinery (meta-device init, dtype, device placement, weight tying) without looking for files.
    user_generation_config = "generation_config" in kwargs
    model, loading_info = decoder_class.from_pretrained(
        None, *model_args, config=decoder_config, state_dict=state_dict, output_loading_info=True, **kwargs
    )
    del state_dict
    _raise_on_key_mismatch(loading_info, checkpoint_names, pretrained_model_name_or_path)

    model.name_or_path = model.config.name_or_path = str(pretrained_model_name_or_path)
    if not user_generation_config:
        _load_generation_config(model, pretrained_model_name_or_path, trust_remote_code, hub_kwargs)
    return (model, loading_info) if output_loading_info else model


def _check_weights_format(kwargs: dict) -> None:
    """Refuse the loading options of weights other than safetensors, the only format read here."""
    if kwargs.pop("use_safetensors", None) is False:
        raise ValueError(
            "Text-only loading reads safetensors checkpoints only; `use_safetensors=False` is not supported."
        )
    if kwargs.get("gguf_file") is not None:
        raise ValueError("Text-only loading does not support `gguf_file`.")


def _text_only_config(path, config, trust_remote_code, hub_kwargs: dict) -> tuple[PreTrainedConfig, TextOnlyFamily]:
    """The multimodal config (the one given, or the checkpoint's) and its text-only rule; refuses a type without one."""
    if not isinstance(config, PreTrainedConfig):
        config = AutoConfig.from_pretrained(
            config if config is not None else path, trust_remote_code=trust_remote_code, **hub_kwargs
        )
    family = TEXT_ONLY_FAMILIES.get(config.model_type)
    if family is None:
        raise ValueError(
            f"Model type {config.model_type!r} is not covered by text-only loading; covered: {sorted(TEXT_ONLY_FAMILIES)}."
        )
    return config, family


def _load_generation_config(model: PreTrainedModel, path, trust_remote_code, hub_kwargs: dict) -> None:
    """Give the decoder the checkpoint's generation config, as `from_pretrained` of a path does, when it has one."""
    generation_config_file = cached_file(
        path, "generation_config.json", _raise_exceptions_for_missing_entries=False, **hub_kwargs
    )
    if generation_config_file is not None and model.can_generate():
        model.generation_config = GenerationConfig.from_pretrained(
            os.path.dirname(generation_config_file), trust_remote_code=trust_remote_code
        )


class AutoModelForCausalLM:
    """Drop-in for `transformers.AutoModelForCausalLM` that loads only the text decoder of a multimodal checkpoint.

    For a config whose model type is in `TEXT_ONLY_FAMILIES` (Gemma3, PaliGemma, LLaVA, ...), the decoder's causal-LM
    class is built from the text config and only its weights are read (`load_text_decoder`). Any other checkpoint
    or config is handed to `transformers.AutoModelForCausalLM` unchanged.

    Example:

    ```python
    >>> from vlmprep.text_only import AutoModelForCausalLM
    >>> from vlmprep.testing import tiny_gemma3_config
    >>> model = AutoModelForCausalLM.from_config(tiny_gemma3_config())  # or .from_pretrained(path, dtype="auto")
    >>> type(model).__name__
    'Gemma3ForCausalLM'

    ```
    """

    def __init__(self, *args, **kwargs):
        raise OSError(
            f"{type(self).__name__} is designed to be instantiated with `{type(self).__name__}.from_pretrained(...)` "
            f"or `{type(self).__name__}.from_config(config)`."
        )

    @classmethod
    def from_config(cls, config: PreTrainedConfig, **kwargs) -> PreTrainedModel:
        """Builds a randomly initialized causal LM from a config: the text decoder alone for a covered VLM config.

        Args:
            config (`PreTrainedConfig`): a multimodal config (its text decoder is built) or a text config.
            kwargs: passed on to `transformers.AutoModelForCausalLM.from_config` (`dtype`, `attn_implementation`, ...).

        Returns:
            `PreTrainedModel`
        """
        if _is_text_only_family(config):
            config = text_decoder_config(config)
        return transformers.AutoModelForCausalLM.from_config(config, **kwargs)

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike, *model_args, **kwargs
    ) -> PreTrainedModel:
        """Loads a causal LM; for a covered multimodal checkpoint, its text decoder only.

        Args:
            pretrained_model_name_or_path (`str` or `os.PathLike`): a local directory or Hub repo id.
            model_args: positional arguments for the model's `__init__`.
            kwargs: as for `transformers.AutoModelForCausalLM.from_pretrained`.

        Returns:
            `PreTrainedModel` (or `(model, loading_info)` with `output_loading_info=True`).
        """
        config = kwargs.get("config")
        if not isinstance(config, PreTrainedConfig):
            config_kwargs = {name: kwargs[name] for name in (*_HUB_KWARGS, "trust_remote_code") if name in kwargs}
            try:
                config = AutoConfig.from_pretrained(
                    config if config is not None else pretrained_model_name_or_path, **config_kwargs
                )
            except (OSError, ValueError):
                # Not ours to diagnose: transformers raises its own, familiar error for this path.
                config = None
        if _is_text_only_family(config):
            kwargs["config"] = config
            return load_text_decoder(pretrained_model_name_or_path, *model_args, **kwargs)
        return transformers.AutoModelForCausalLM.from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
