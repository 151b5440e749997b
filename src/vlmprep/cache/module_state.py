"""What of a model's modules changes its `forward` without changing a tensor: train mode anywhere, PEFT adapter state
and the attention implementation. The cache identity (`vlmprep.cache.identity`) reads them."""

from __future__ import annotations

import functools
import uuid

from torch import nn

__all__ = ["adapter_state", "any_module_training", "attention_state", "is_adapter_layer"]


def any_module_training(model: nn.Module) -> bool:
    """Whether any module of `model` is in training mode, not only the top one.

    `model.language_model.train()` or `model.vision_tower.train()` leaves `model.training` False while dropout runs
    in that part: features and KV computed then depend on the call's dropout and are never stored or reused.

    Args:
        model (`nn.Module`): the model.

    Returns:
        `bool`
    """
    # An explicit walk over the instance dicts: `model.modules()` recurses through generators and dedups with a set,
    # ~0.6 ms for a small VLM's ~300 modules, on every generate call (the caches ask before each lookup)
    stack = [model]
    while stack:
        state = stack.pop().__dict__
        if state["training"]:
            return True
        stack.extend(child for child in state["_modules"].values() if child is not None)
    return False


@functools.cache
def is_adapter_layer(module_class: type) -> bool:
    """Whether modules of this class are PEFT tuner layers (`peft.tuners.tuners_utils.BaseTunerLayer`: LoRA, IA3,
    LoKr, ...), told by the attributes that keep their adapter state (peft need not be installed).

    Args:
        module_class (`type`): a module's class.

    Returns:
        `bool`
    """
    return all(hasattr(module_class, name) for name in ("_disable_adapters", "_active_adapter", "merged_adapters"))


def adapter_state(module: nn.Module) -> tuple:
    """What of a PEFT tuner layer changes its forward without changing a tensor: disabled or not, the active adapters,
    the merged ones, and each adapter's scale (`set_scale`, `scale_layer`).

    A layer with forward pre-hooks is in a call with per-row adapters (`adapter_names=`, `alora_offsets=`, which PEFT
    applies through hooks for that call only): no key can say which row saw which adapter, so such a state never
    equals another and nothing made in that call is served.

    Args:
        module (`nn.Module`): a tuner layer (`is_adapter_layer`).

    Returns:
        `tuple`: equal for two calls exactly when the layer's adapter state is the same.
    """
    if module._forward_pre_hooks:
        return ("per-call adapter hooks", uuid.uuid4().hex)
    scaling = getattr(module, "scaling", None)
    return (
        bool(module._disable_adapters),
        repr(module._active_adapter),
        tuple(module.merged_adapters),
        tuple(sorted(scaling.items())) if isinstance(scaling, dict) else repr(scaling),
    )


def attention_state(model: nn.Module) -> str:
    """The attention implementation of `model.config` and of each of its sub-configs, nested ones included (what
    `set_attn_implementation` sets): kernels that round differently (SDPA, eager) give features and KV that differ in
    the last bits, which a sparse top-k (GLM-5-Next's indexer) can turn into another selection of keys.

    Args:
        model (`nn.Module`): a model; without a `config`, `"attention()"`.

    Returns:
        `str`, e.g. `"attention(sdpa,sdpa,eager)"`
    """
    names, configs = [], [getattr(model, "config", None)]
    while configs:
        config = configs.pop(0)
        if config is None:
            continue
        names.append(str(getattr(config, "_attn_implementation", None)))
        configs += [getattr(config, name, None) for name in getattr(config, "sub_configs", {})]
    return f"attention({','.join(names)})"
