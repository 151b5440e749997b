"""`vlmprep.register()`: make transformers' own auto classes (and so `pipeline`, `transformers serve`) load the drop-ins.

transformers' auto classes map a config class to a model class; `AutoClass.register(config_class, model_class,
exist_ok=True)` is the public way to override a built-in entry (without `exist_ok=True`, an entry for a transformers
config is refused, or silently skipped). `register()` does that for every drop-in, in every auto class whose mapping
sends the drop-in's model type to the transformers class the drop-in subclasses, and remembers what it replaced, so
that `unregister()` puts transformers' classes back.
"""

from __future__ import annotations

import threading
from typing import Any

import transformers
from transformers.models.auto import modeling_auto

from .utils.logging import get_logger

__all__ = ["AUTO_CLASSES", "register", "registered", "unregister"]

logger = get_logger(__name__)

# auto class name -> the name of its mapping in `transformers.models.auto.modeling_auto`. A class missing from the
# installed transformers (`AutoModelForVision2Seq` was removed in 5.x) is skipped.
AUTO_CLASSES: dict[str, str] = {
    "AutoModelForImageTextToText": "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING",
    "AutoModelForMultimodalLM": "MODEL_FOR_MULTIMODAL_LM_MAPPING",
    "AutoModelForVision2Seq": "MODEL_FOR_VISION_2_SEQ_MAPPING",
    # gemma3 (and a few others) map the causal-LM auto class to the whole conditional model; there it is the drop-in.
    "AutoModelForCausalLM": "MODEL_FOR_CAUSAL_LM_MAPPING",
}

_lock = threading.Lock()
# (auto class name, config class) -> the model class `register()` replaced there
_replaced: dict[tuple[str, type], type] = {}


def _available_auto_classes() -> list[tuple[str, Any, Any]]:
    found = []
    for class_name, mapping_name in AUTO_CLASSES.items():
        auto_class = getattr(transformers, class_name, None)
        mapping = getattr(modeling_auto, mapping_name, None)
        if auto_class is not None and mapping is not None:
            found.append((class_name, auto_class, mapping))
    return found


def register() -> dict[str, list[str]]:
    """Registers every vlmprep drop-in with transformers' auto classes.

    Afterwards `transformers.AutoModelForImageTextToText.from_pretrained(path)`, `AutoModelForMultimodalLM`,
    `pipeline("image-text-to-text", model=path)` and `transformers serve` (in this process) build vlmprep's class,
    with its encoder cache, wherever they built the transformers class before. A drop-in is registered only in the
    auto classes that already map its model type to the transformers class it subclasses, so no auto class starts
    loading a model it did not load before. Alias types (`shieldgemma2`, another type's class under its own config)
    are left to transformers' class: its `register` takes a class only under that class's own config class. Calling
    it again changes nothing.

    Returns:
        `dict[str, list[str]]`: for each auto class, the model types now loading a drop-in.

    Example:

    ```python
    >>> import transformers, vlmprep
    >>> from vlmprep.testing import tiny_gemma3_config
    >>> _ = vlmprep.register()
    >>> type(transformers.AutoModelForImageTextToText.from_config(tiny_gemma3_config())).__module__
    'vlmprep.models.gemma3'
    >>> vlmprep.unregister()
    >>> type(transformers.AutoModelForImageTextToText.from_config(tiny_gemma3_config())).__module__
    'transformers.models.gemma3.modeling_gemma3'

    ```
    """
    from .models.auto import DROP_IN_CLASSES

    registered_types: dict[str, list[str]] = {}
    with _lock:
        for class_name, auto_class, mapping in _available_auto_classes():
            for model_type, drop_in in DROP_IN_CLASSES.items():
                config_class = drop_in.config_class
                if config_class.model_type != model_type:
                    # An alias type (`shieldgemma2`): transformers' `register` takes a class only under its own
                    # `config_class`, so the auto classes keep loading transformers' class for it
                    continue
                current = mapping.get(config_class, None)
                if current is None or not (current is drop_in or issubclass(drop_in, current)):
                    continue  # this auto class does not load the model the drop-in replaces
                if current is not drop_in:
                    _replaced.setdefault((class_name, config_class), current)
                    auto_class.register(config_class, drop_in, exist_ok=True)
                registered_types.setdefault(class_name, []).append(model_type)
    logger.info(
        "vlmprep drop-ins registered with %s",
        ", ".join(f"{name} ({len(types)} model types)" for name, types in registered_types.items()),
    )
    return registered_types


def unregister() -> None:
    """Puts back, in every auto class, the transformers classes that `register()` replaced."""
    with _lock:
        auto_classes = {class_name: auto_class for class_name, auto_class, _ in _available_auto_classes()}
        for (class_name, config_class), previous in _replaced.items():
            # `register` is the public way to set an entry; the replaced class becomes the entry again.
            auto_classes[class_name].register(config_class, previous, exist_ok=True)
        _replaced.clear()


def registered() -> bool:
    """Whether `register()` is in effect (and `unregister()` has not undone it)."""
    return bool(_replaced)
