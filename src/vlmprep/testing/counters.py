"""The two work counters of tests, the demo and the benchmarks: vision-encoder runs and language-model tokens.

Work is counted where it happens (the model's own encoder methods, a hook on its language model), never inferred from
time, so a count stays exact on a busy machine.
"""

from __future__ import annotations

import functools
import inspect
import time

import torch

from ..generation.encoding import encoder_name, encoding_module


class VisionRunCounter:
    """Counts a model's encoder calls and the items (images, videos, audio clips) each call encoded.

    It wraps the model's own `get_image_features` / `get_video_features` / `get_audio_features`, or a drop-in's own
    encoder where transformers' class has none (`vlmprep.generation.encoding.encoder_name`), on this model instance
    only, and counts items with the family's `count_items`, so tiles, crops and flattened patches count as the
    images they belong to.

    Example:

    ```python
    >>> from vlmprep import Gemma3ForConditionalGeneration
    >>> from vlmprep.testing import random_pixels, tiny_gemma3_config
    >>> model = Gemma3ForConditionalGeneration(tiny_gemma3_config()).eval()
    >>> with VisionRunCounter(model) as runs:
    ...     _ = model.model.get_image_features(random_pixels(2))
    >>> runs.calls, runs.images
    (1, 2)

    ```
    """

    MODALITIES = ("image", "video", "audio")

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.encoder_owner = encoding_module(model)
        self.batch_sizes: list[int] = []
        self._wrapped: list[str] = []
        self._active = False

    def _counting(self, modality: str, encode):
        signature = inspect.signature(encode)
        takes_any = any(param.kind is param.VAR_KEYWORD for param in signature.parameters.values())

        @functools.wraps(encode)  # keeps the signature the mixin inspects
        def wrapper(*args, **kwargs):
            if self._active:
                # An encoder calling another (Qwen3-VL's videos go through `get_image_features`): one run, counted once
                return encode(*args, **kwargs)
            # Decorators may take keywords the encoder's own signature lacks (`return_dict` of `can_return_tuple`)
            known = {name: value for name, value in kwargs.items() if name in signature.parameters or takes_any}
            bound = signature.bind(*args, **known)
            named = {name: value for name, value in bound.arguments.items() if name != "kwargs"}
            named.update(bound.arguments.get("kwargs", {}))
            self.batch_sizes.append(self._count(modality, named))
            self._active = True
            try:
                return encode(*args, **kwargs)
            finally:
                self._active = False

        return wrapper

    def _count(self, modality: str, kwargs: dict) -> int:
        count_items = getattr(self.model, "count_items", None)
        if count_items is None:
            pixels = next(iter(kwargs.values()))
            return int(pixels.shape[0])
        count = count_items(kwargs) if modality == "image" else count_items(kwargs, modality=modality)
        return int(count or 0)

    def __enter__(self) -> VisionRunCounter:
        for modality in self.MODALITIES:
            name = encoder_name(self.encoder_owner, modality)
            encode = getattr(self.encoder_owner, name, None)
            if encode is not None:
                setattr(self.encoder_owner, name, self._counting(modality, encode))
                self._wrapped.append(name)
        return self

    def __exit__(self, *exc) -> None:
        for name in self._wrapped:
            delattr(self.encoder_owner, name)  # the instance attribute; the class method shows through again
        self._wrapped = []

    @property
    def calls(self) -> int:
        return len(self.batch_sizes)

    @property
    def images(self) -> int:
        return sum(self.batch_sizes)


class PrefillCounter:
    """Records every forward of a model's language model: the tokens it was fed and when it started.

    Prefill chunks and decode steps are all forwards. A `generate` call that produced `n` tokens ran `n - 1`
    one-token decode steps after its prefill, so its prefilled tokens are the recorded total minus `n - 1`, however
    many chunks the prefill took and however much of the prompt a cache already held.

    Args:
        model (`torch.nn.Module`): a transformers (or vlmprep) model whose `get_decoder()` is its language model.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep import Gemma3ForConditionalGeneration
    >>> from vlmprep.testing import IMAGE, build_prompt, random_pixels, tiny_gemma3_config
    >>> model = Gemma3ForConditionalGeneration(tiny_gemma3_config(mm_tokens_per_image=4)).eval()
    >>> ids, types = build_prompt(model.config, [[5, 6], IMAGE, [7]])
    >>> with PrefillCounter(model) as prefill:
    ...     _ = model.generate(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types]),
    ...                        pixel_values=random_pixels(1), max_new_tokens=3, min_new_tokens=3, do_sample=False)
    >>> prefill.lengths, prefill.prefilled(new_tokens=3)
    ([9, 1, 1], 9)

    ```
    """

    def __init__(self, model: torch.nn.Module):
        self.language_model = model.get_decoder()
        self.lengths: list[int] = []  # tokens fed to each forward, in order
        self.times: list[float] = []  # `time.perf_counter()` at the start of each forward
        self._handle = None

    def _record(self, module, args, kwargs) -> None:
        self.times.append(time.perf_counter())
        embeds = kwargs.get("inputs_embeds")
        ids = kwargs.get("input_ids", args[0] if args else None)
        tensor = embeds if embeds is not None else ids
        self.lengths.append(int(tensor.shape[1]) if tensor is not None else 0)

    def __enter__(self) -> PrefillCounter:
        self._handle = self.language_model.register_forward_pre_hook(self._record, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()

    @property
    def forwards(self) -> int:
        """Language-model forwards recorded (prefill chunks and decode steps)."""
        return len(self.lengths)

    def prefilled(self, new_tokens: int, calls: int = 1) -> int:
        """Prompt tokens prefilled by the `generate` calls run inside the `with` block.

        Args:
            new_tokens (`int`): tokens each call generated.
            calls (`int`, *optional*, defaults to 1): `generate` calls recorded.

        Returns:
            `int`
        """
        return sum(self.lengths) - calls * max(0, new_tokens - 1)
