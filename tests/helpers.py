"""Reference computations shared by the behavioural tests."""

from __future__ import annotations

import torch

from vlmprep.testing import build_prompt, random_pixels

ATOL = 1e-5


class Prompt:
    """A tiny prompt: ids, token types and pixels, as the family's processor would return them."""

    def __init__(self, config, segments: list, seed: int = 0, image_seeds: list[int] | None = None):
        ids, types = build_prompt(config, segments)
        self.input_ids = torch.tensor([ids])
        self.token_type_ids = torch.tensor([types]) if types is not None else None
        num_images = sum(1 for segment in segments if not isinstance(segment, list))
        seeds = image_seeds if image_seeds is not None else [seed + i for i in range(num_images)]
        self.pixel_values = torch.cat([random_pixels(1, s) for s in seeds]) if seeds else None

    def inputs(self, length: int | None = None, with_pixels: bool = True) -> dict:
        """Model inputs, optionally truncated to the first `length` tokens."""
        end = length if length is not None else self.input_ids.shape[1]
        inputs = {"input_ids": self.input_ids[:, :end]}
        if self.token_type_ids is not None:
            inputs["token_type_ids"] = self.token_type_ids[:, :end]
        if with_pixels and self.pixel_values is not None:
            inputs["pixel_values"] = self.pixel_values
        return inputs

    @property
    def length(self) -> int:
        return self.input_ids.shape[1]


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
