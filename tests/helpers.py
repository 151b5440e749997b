"""Reference computations shared by the behavioural tests."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from family_registry import FAMILY_CASES

ATOL = 1e-5


class Prompt:
    """A tiny prompt as the family's processor would return it: ids, per-token inputs and pixel inputs."""

    def __init__(self, config, segments: list, seed: int = 0, image_seeds: list[int] | None = None):
        self.case = FAMILY_CASES[config.model_type]
        num_images = sum(1 for segment in segments if not isinstance(segment, list))
        seeds = image_seeds if image_seeds is not None else [seed + i for i in range(num_images)]
        self.full_inputs = self.case.build_inputs(config, segments, seeds)
        self.input_ids = self.full_inputs["input_ids"]
        self.token_type_ids = self.full_inputs.get("token_type_ids")
        self.pixel_values = self.full_inputs.get("pixel_values")

    def inputs(self, length: int | None = None, with_pixels: bool = True) -> dict:
        """Model inputs, optionally truncated to the first `length` tokens."""
        end = length if length is not None else self.length
        inputs = {}
        for key, value in self.full_inputs.items():
            if key in self.case.pixel_keys:
                if with_pixels:
                    inputs[key] = value
            elif key == "input_ids" or key in self.case.per_token_keys:
                inputs[key] = value[..., :end]
            else:
                inputs[key] = value
        return inputs

    @property
    def length(self) -> int:
        return self.input_ids.shape[1]


def collate(prompts: list[Prompt], pad_token_id: int) -> dict:
    """A left-padded batch of prompts, as a processor with `padding_side="left"` returns it."""
    case = prompts[0].case
    if case.collate is not None:
        return case.collate(prompts, pad_token_id)
    width = max(prompt.length for prompt in prompts)

    def left_pad(value: torch.Tensor, fill: int) -> torch.Tensor:
        return torch.nn.functional.pad(value, (width - value.shape[-1], 0), value=fill)

    batch = {
        "input_ids": torch.cat([left_pad(p.input_ids, pad_token_id) for p in prompts]),
        "attention_mask": torch.cat([left_pad(torch.ones_like(p.input_ids), 0) for p in prompts]),
    }
    for key in prompts[0].full_inputs:
        if key in case.per_token_keys:
            values = [left_pad(prompt.full_inputs[key], 0) for prompt in prompts]
            batch[key] = torch.cat(values, dim=1 if values[0].ndim == 3 else 0)  # 3D: (3, batch, seq) positions
        elif key in case.pixel_keys:
            batch[key] = torch.cat([p.full_inputs[key] for p in prompts])
    return batch


def reference_next_logits(upstream, prompt: Prompt) -> torch.Tensor:
    """Last-position logits of one uncached forward of the whole prompt: the exactness reference."""
    with torch.no_grad():
        return upstream(**prompt.inputs(), use_cache=False).logits[:, -1]


def generate_logits(model, inputs: dict, max_new_tokens: int = 3, **kwargs):
    """(sequences, per-step logits) of a greedy generate."""
    out = model.generate(
        **inputs,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
        **kwargs,
    )
    return out.sequences, out.logits


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float = ATOL) -> None:
    diff = (actual - expected).abs().max().item()
    assert torch.allclose(actual, expected, atol=atol), f"max abs diff {diff:.3e} > {atol}"


def cache_of(model, inputs: dict) -> DynamicCache:
    """KV cache of one forward over `inputs` (the upstream way a caller fills a cache)."""
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        return model(**inputs, cache=cache, use_cache=True).cache


def assert_same_steps(actual, expected) -> None:
    """Per-step logits of two generations are allclose."""
    for step_actual, step_expected in zip(actual, expected, strict=True):
        assert_close(step_actual, step_expected)
