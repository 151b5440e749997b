"""`AutoModelForImageTextToText`: model type -> vlmprep drop-in class (`vlmprep.models.registry`)."""

from __future__ import annotations

import os

import transformers
from transformers import AutoConfig, PreTrainedConfig, PreTrainedModel

from ..utils.logging import get_logger
from .registry import load_drop_in_classes

logger = get_logger(__name__)

# The keywords that say where a checkpoint's config is (the hub keywords of transformers' auto classes, plus the
# config's own: remote code, its revision, a GGUF file). Only they are used to read the config that picks the class;
# everything the caller passed, these included, then goes to that class's `from_pretrained`, which reads the config
# again with all of them (so config attribute overrides such as `use_cache=False` act as in transformers).
_CONFIG_LOCATION_KWARGS = (
    "cache_dir",
    "force_download",
    "local_files_only",
    "proxies",
    "revision",
    "subfolder",
    "token",
    "trust_remote_code",
    "gguf_file",
)


# model_type -> drop-in class, from `vlmprep.models.registry` (this imports every family module). A model type missing
# here loads as the transformers class, with a warning.
DROP_IN_CLASSES: dict[str, type[PreTrainedModel]] = load_drop_in_classes()


def _drop_in_class(config: PreTrainedConfig) -> type[PreTrainedModel] | None:
    cls = DROP_IN_CLASSES.get(config.model_type)
    refusal = None if cls is None else cls.config_refusal(config)
    if refusal is not None:
        # A drop-in that refuses some checkpoints of its type (BLIP-2 with Flan-T5): they load as transformers' class.
        logger.warning(
            "vlmprep's drop-in does not take this checkpoint (%s); loading transformers' own class.", refusal
        )
        return None
    if cls is None:
        logger.warning(
            "vlmprep has no drop-in class for model type %r; loading transformers' own class (images are encoded "
            "as transformers does). Supported: %s",
            config.model_type,
            ", ".join(sorted(DROP_IN_CLASSES)),
        )
    return cls


class AutoModelForImageTextToText:
    """Loads the vlmprep drop-in class of a checkpoint's model type, like `transformers.AutoModelForImageTextToText`.

    Example:

    ```python
    >>> from vlmprep import AutoModelForImageTextToText
    >>> from vlmprep.testing import tiny_gemma3_config
    >>> type(AutoModelForImageTextToText.from_config(tiny_gemma3_config())).__module__
    'vlmprep.models.gemma3'

    ```
    """

    def __init__(self, *args, **kwargs):
        raise OSError("Use `AutoModelForImageTextToText.from_pretrained(...)` or `.from_config(...)`.")

    @classmethod
    def from_config(cls, config: PreTrainedConfig, **kwargs) -> PreTrainedModel:
        """Build a randomly initialized model of `config`'s type.

        Args:
            config (`PreTrainedConfig`): the model config.
            kwargs: passed to the class's `_from_config` (e.g. `dtype`, `attn_implementation`).

        Returns:
            `PreTrainedModel`: the drop-in class, or transformers' class for unsupported types.
        """
        model_class = _drop_in_class(config)
        if model_class is None:
            return transformers.AutoModelForImageTextToText.from_config(config, **kwargs)
        return model_class._from_config(config, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args, **kwargs) -> PreTrainedModel:
        """Load a checkpoint (a local directory or hub id) into its drop-in class.

        Args:
            pretrained_model_name_or_path (`str` or `os.PathLike`): the checkpoint.
            args, kwargs: everything `transformers.AutoModelForImageTextToText.from_pretrained` accepts
                (`subfolder`, `revision`, `dtype`, `device_map`, `attn_implementation`, config attribute
                overrides, ...), handed unchanged to the drop-in's `from_pretrained`. The keywords that locate the
                config (`subfolder`, `revision`, `cache_dir`, `token`, `local_files_only`, `trust_remote_code`,
                ...) are also used to read the config that picks the class.

        Returns:
            `PreTrainedModel`
        """
        config = kwargs.get("config")
        # Only remote code has a revision of its own; the drop-ins are local code, so it acts on the config alone.
        code_revision = kwargs.pop("code_revision", None)
        if isinstance(config, PreTrainedConfig):
            picked_by = config
        else:
            # `config` may also be a path or hub id of the config alone, as in transformers.
            config_kwargs = {name: kwargs[name] for name in _CONFIG_LOCATION_KWARGS if name in kwargs}
            picked_by = AutoConfig.from_pretrained(
                config if config is not None else pretrained_model_name_or_path,
                code_revision=code_revision,
                **config_kwargs,
            )
        model_class = _drop_in_class(picked_by)
        if model_class is None:
            return transformers.AutoModelForImageTextToText.from_pretrained(
                pretrained_model_name_or_path, *args, code_revision=code_revision, **kwargs
            )
        if config is None and not isinstance(picked_by, model_class.config_class):
            # An alias type (`shieldgemma2` is `Gemma3ForConditionalGeneration`): the drop-in's own config class
            # would misread this config, so, as transformers' auto class does, it is read once with the caller's
            # overrides and passed on.
            location = {name: kwargs.pop(name) for name in _CONFIG_LOCATION_KWARGS if name in kwargs}
            config, kwargs = AutoConfig.from_pretrained(
                pretrained_model_name_or_path,
                return_unused_kwargs=True,
                code_revision=code_revision,
                **location,
                **kwargs,
            )
            kwargs = {**location, **kwargs, "config": config}
        return model_class.from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
