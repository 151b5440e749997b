"""Tiny random-weight model configs for tests, demos and benchmarks: one builder per drop-in family.

Every builder returns a transformers config small enough to run on a CPU in milliseconds (2 decoder layers, hidden
size 32, images of 8-32 px), made of the shared parts of `parts` (special token ids `TINY_*`, a tiny decoder, tiny
vision towers). Token ids above 100 are reserved for special tokens so that random text ids (drawn from 3..99) never
collide with them. The registry (`vlmprep.models.registry.FAMILY_SPECS`) names each drop-in's builder;
`tiny_config` looks it up by model type. Every `tiny_<name>_config` a module below defines is exported from here (the
modules are read, not listed: a new family's builder goes into the module of its shape, and nothing here changes).

- `fixed_size`: one image size (Gemma3, PaliGemma, LLaVA, VipLLaVA, Video-LLaVA, DeepSeek-VL(-Hybrid), Aria);
- `crops`: images of any size cut into crops, tiles, sub-images or patch rows (LLaVA-NeXT, Idefics3, InternVL, ...);
- `image_tokens`: images made vocabulary tokens by a VQ-VAE (Chameleon, Emu3), or with a VQ-VAE for image generation (Janus);
- `linear_patches`: flattened patches embedded by one linear layer (Fuyu);
- `qformer`: the Q-Former families, whose learned queries fill a fixed run per image (BLIP-2, InstructBLIP);
- `audio_frames`, `audio_samples`, `hybrid_audio`: images and audio clips in one prompt, the clips as log-mel frames
  (Gemma 4, the Qwen-Omni thinkers), counted by their waveform samples (Muse Spark, Apertus 1.5, Dots 3 Note), or on a
  hybrid decoder (Inkling, Nemotron-H Omni);
- `cross_attention`: images read by cross-attention layers of the decoder (Llama 3.2 Vision);
- `encoder_decoder`: image features in an encoder's prompt, a decoder that cross-attends (Florence-2, T5Gemma 2);
- `patch_grid`: flattened patches with a `(t, h, w)` grid per image (Qwen-VL, GLM-4V, EXAONE 4.5, ...), and `muse`
  Muse Glimmer's (whose parts Muse Spark reuses).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from transformers import PreTrainedConfig

from ...models.registry import FAMILY_SPECS

# Modules that are not config builders: `serve` writes a whole chat checkpoint and is run as a script.
_NOT_BUILDER_MODULES = ("serve",)


def _builders_of_modules() -> dict[str, Callable[[], PreTrainedConfig]]:
    """Every `tiny_<name>_config` function defined by a module of this package, by name."""
    builders = {}
    for module_info in pkgutil.iter_modules(__path__):
        if module_info.name in _NOT_BUILDER_MODULES:
            continue
        module = importlib.import_module(f".{module_info.name}", __name__)
        for name, value in vars(module).items():
            is_builder = name.startswith("tiny_") and name.endswith("_config") and callable(value)
            if is_builder and getattr(value, "__module__", None) == module.__name__:
                builders[name] = value
    return dict(sorted(builders.items()))


_BUILDERS = _builders_of_modules()
globals().update(_BUILDERS)

# model_type -> builder, for every drop-in of the registry whose builder exists (`utils/check_exports.py` reports a
# drop-in without one).
TINY_CONFIG_BUILDERS: dict[str, Callable[[], PreTrainedConfig]] = {
    model_type: _BUILDERS[spec.tiny_config]
    for model_type, spec in sorted(FAMILY_SPECS.items())
    if spec.tiny_config is not None and spec.tiny_config in _BUILDERS
}


def tiny_config(model_type: str) -> PreTrainedConfig:
    """The tiny test config of a drop-in's model type (`"gemma3"`, `"qwen2_vl"`, ...), from its registry entry.

    Args:
        model_type (`str`): a model type with a drop-in (a key of `TINY_CONFIG_BUILDERS`).

    Returns:
        `PreTrainedConfig`: a fresh config, of that model type.

    Example:

    ```python
    >>> tiny_config("qwen2_vl").vision_config.spatial_merge_size
    2

    ```
    """
    if model_type not in TINY_CONFIG_BUILDERS:
        raise ValueError(f"No tiny config for model type {model_type!r}; known: {sorted(TINY_CONFIG_BUILDERS)}")
    return TINY_CONFIG_BUILDERS[model_type]()


__all__ = ["TINY_CONFIG_BUILDERS", "tiny_config", *_BUILDERS]
