"""`VisionPrepMixin`: the class every drop-in derives from, generation and continuous batching together.

The generation mixin knows nothing of batching, and batching imports generation, never the reverse: the two meet only
here, where the drop-ins are built, so that imports point down (models -> batching -> generation -> cache).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from transformers import PreTrainedConfig

from ..batching.mixin import ContinuousBatchingMixin
from ..generation.mixin import VisionPrepGenerationMixin

__all__ = ["VisionPrepMixin", "keeps_upstream_interface"]


class VisionPrepMixin(VisionPrepGenerationMixin, ContinuousBatchingMixin):
    """The base of every drop-in: `VisionPrepGenerationMixin` (`generate`) and `ContinuousBatchingMixin`
    (`generate_batch`, `init_continuous_batching`) for a transformers VLM class listed after it.

    A drop-in lists this class (after any layout's hooks) before the transformers class, and states its
    `vision_facts`.

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep import VisionFacts, VisionPrepMixin
    >>> class MyGemma3(VisionPrepMixin, transformers.Gemma3ForConditionalGeneration):
    ...     vision_facts = VisionFacts(bidirectional="image")
    >>> hasattr(MyGemma3, "generate_batch")
    True

    ```
    """

    def __init__(self, config: PreTrainedConfig, *args, **kwargs):
        refusal = type(self).config_refusal(config)
        if refusal is not None:
            raise ValueError(f"{type(self).__name__} (vlmprep) cannot run this model: {refusal}")
        super().__init__(config, *args, **kwargs)

    @classmethod
    def config_refusal(cls, config: PreTrainedConfig) -> str | None:
        """Why this drop-in does not take a config of its model type, or `None` (it takes every one).

        A family whose type covers checkpoints vlmprep cannot prepare (BLIP-2 with a Flan-T5 language model)
        states why; `vlmprep.AutoModelForImageTextToText` then loads transformers' class, with a warning.

        Args:
            config (`PreTrainedConfig`): a config of the drop-in's model type.

        Returns:
            `str` or `None`
        """
        return None

    # transformers decides whether `set_attn_implementation` / `set_experts_implementation` (and the matching
    # `from_pretrained` arguments) may switch a class by reading the source of the class's module (`inspect.getsource`
    # of `cls.__module__`, looking for `@use_experts_implementation` and the attention interface). A drop-in's module is
    # vlmprep's, which runs none of that code: ask the transformers class it derives from, whose modeling code runs.

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        return _transformers_class(cls)._can_set_attn_implementation()

    @classmethod
    def _can_set_experts_implementation(cls) -> bool:
        return _transformers_class(cls)._can_set_experts_implementation()


def _transformers_class(cls: type) -> type:
    """The first class of `cls`'s MRO defined in transformers' own model code (the one a drop-in derives from)."""
    return next(base for base in cls.__mro__ if base.__module__.startswith("transformers.models."))


def keeps_upstream_interface(upstream_forward: Callable) -> Callable[[Callable], Callable]:
    """A decorator for a drop-in's `forward` that wraps upstream's `(*args, **kwargs)`: the wrapper shows upstream's
    signature and annotations.

    `generate` validates its kwargs against the forward's signature, and transformers' own model tests read the output
    type from the forward's annotations (`test_moe_models_record_router_logits`); a bare `(*args, **kwargs)` has
    neither.

    Args:
        upstream_forward (`Callable`): the transformers class's `forward`.

    Returns:
        `Callable`: the decorator, which returns the wrapper it is given, with upstream's interface.

    Example:

    ```python
    >>> import inspect, transformers
    >>> from vlmprep.models.base import keeps_upstream_interface
    >>> class Model(transformers.Gemma3ForConditionalGeneration):
    ...     @keeps_upstream_interface(transformers.Gemma3ForConditionalGeneration.forward)
    ...     def forward(self, *args, **kwargs):
    ...         return super().forward(*args, **kwargs)
    >>> "pixel_values" in inspect.signature(Model.forward).parameters
    True

    ```
    """

    def decorate(forward: Callable) -> Callable:
        forward.__signature__ = inspect.signature(upstream_forward)
        forward.__annotations__ = dict(upstream_forward.__annotations__)
        return forward

    return decorate
