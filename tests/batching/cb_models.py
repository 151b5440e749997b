"""Shared pieces of the continuous-batching tests: a LLaVA drop-in with the mixin, and references from transformers."""

from __future__ import annotations

import torch
from transformers import ContinuousBatchingConfig, GenerationConfig

import vlmprep
from conftest import model_pair
from vlmprep.batching import ContinuousBatchingMixin
from vlmprep.testing import random_pixels


class LlavaCB(ContinuousBatchingMixin, vlmprep.LlavaForConditionalGeneration):
    """What the drop-in will be once the mixin is part of it."""


_MODELS: dict[str, tuple[torch.nn.Module, torch.nn.Module]] = {}


def llava_cb_pair() -> tuple[torch.nn.Module, LlavaCB]:
    """(plain transformers LLaVA, `LlavaCB`) with the same image-sensitive weights (the conformance pair's)."""
    if "llava" not in _MODELS:
        upstream, _ = model_pair("llava")
        ours = LlavaCB(upstream.config).eval()
        ours.load_state_dict(upstream.state_dict())
        _MODELS["llava"] = (upstream, ours)
    upstream, ours = _MODELS["llava"]
    ours.encoder_cache.clear()
    return upstream, ours


def image_run(model) -> list[int]:
    """The placeholder run of one image."""
    return [model.config.image_token_id] * 16


def greedy(max_new_tokens: int) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=-1)


def engine_config(max_batch_tokens: int = 12, page_size: int = 4, **kwargs) -> ContinuousBatchingConfig:
    """A small engine: a budget shorter than the prompts (so they are split across steps), small pages."""
    return ContinuousBatchingConfig(
        max_batch_tokens=max_batch_tokens, num_blocks=128, page_size=page_size, return_logprobs=True, **kwargs
    )


def pixels(*seeds: int) -> torch.Tensor:
    """One image per seed (equal seeds, equal images)."""
    return torch.cat([random_pixels(1, seed=seed) for seed in seeds])


def reference_tokens(upstream, ids: list[int], pixel_values: torch.Tensor | None, max_new_tokens: int) -> list[int]:
    """Greedy tokens of the plain transformers class's `generate` for one request."""
    kwargs = {"pixel_values": pixel_values} if pixel_values is not None else {}
    with torch.no_grad():
        out = upstream.generate(torch.tensor([ids]), **kwargs, max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, len(ids) :].tolist()


def reference_logprobs(upstream, ids: list[int], pixel_values, generated: list[int]) -> torch.Tensor:
    """Log-probabilities of `generated` from ONE uncached forward of the prompt and answer (plain class)."""
    sequence = torch.tensor([ids + generated])
    kwargs = {"pixel_values": pixel_values} if pixel_values is not None else {}
    with torch.no_grad():
        logits = upstream(input_ids=sequence, **kwargs, use_cache=False).logits[0].float()
    steps = logits[len(ids) - 1 : len(ids) - 1 + len(generated)].log_softmax(-1)
    return steps.gather(-1, torch.tensor(generated)[:, None])[:, 0]


def assert_matches_reference(upstream, request, output, max_new_tokens: int) -> None:
    """Tokens equal the plain class's greedy `generate`; log-probabilities equal one uncached forward (1e-5)."""
    ids = request["input_ids"] if isinstance(request, dict) else request
    pixel_values = request.get("pixel_values") if isinstance(request, dict) else None
    assert output.error is None, output.error
    assert output.prompt_ids == list(ids)
    assert output.generated_tokens == reference_tokens(upstream, ids, pixel_values, max_new_tokens)
    expected = reference_logprobs(upstream, ids, pixel_values, output.generated_tokens)
    torch.testing.assert_close(torch.tensor(output.logprobs), expected, atol=1e-5, rtol=0)


def wait_for(manager, request_id: str):
    """The finished output of one request of a running manager."""
    for output in manager.request_id_iter(request_id):
        if output.is_finished():
            return output
    raise AssertionError(f"The manager stopped before request {request_id} finished.")


class TokensFed:
    """Counts the tokens the decoder is fed (every prefill slice and decode token), from a forward pre-hook."""

    def __init__(self, model):
        self.count = 0
        self._handle = model.model.language_model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        self.count += kwargs["inputs_embeds"].shape[1]

    def take(self) -> int:
        """Tokens fed since the last call."""
        count, self.count = self.count, 0
        return count

    def remove(self) -> None:
        self._handle.remove()
