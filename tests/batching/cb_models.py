"""Shared pieces of the continuous-batching tests: drop-ins of their own (the engine keeps its manager on the
model), and references from transformers."""

from __future__ import annotations

import torch
from transformers import ContinuousBatchingConfig, GenerationConfig

import vlmprep
from conftest import model_pair
from vlmprep.testing import random_pixels

# Every drop-in takes images in continuous batching (`ContinuousBatchingMixin` is part of the generation mixin).
LlavaCB = vlmprep.LlavaForConditionalGeneration


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


PER_TOKEN_KEYS = ("token_type_ids", "mm_token_type_ids", "attention_mask")


def split_request(request) -> tuple[list[int], dict]:
    """A request's ids as a list, and its other inputs (tensors with a batch dimension of 1 for per-token inputs)."""
    if not isinstance(request, dict):
        return list(request), {}
    ids = request["input_ids"]
    ids = ids[0].tolist() if isinstance(ids, torch.Tensor) else list(ids)
    return ids, {key: value for key, value in request.items() if key != "input_ids"}


def reference_tokens(upstream, request, max_new_tokens: int) -> list[int]:
    """Greedy tokens of the plain transformers class's `generate` for one request."""
    ids, inputs = split_request(request)
    with torch.no_grad():
        out = upstream.generate(torch.tensor([ids]), **inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, len(ids) :].tolist()


def reference_logprobs(upstream, request, generated: list[int]) -> torch.Tensor:
    """Log-probabilities of `generated` from ONE uncached forward of the prompt and answer (plain class)."""
    ids, inputs = split_request(request)
    # An answered placeholder id is text to `generate`, but a placeholder to a forward with pixels: the forward's
    # input stops before the first one (its own step is still scored; later steps are checked by the tokens).
    placeholders = {getattr(upstream.config, name, None) for name in ("image_token_id", "video_token_id")}
    cut = next((step for step, token in enumerate(generated) if token in placeholders), len(generated))
    fed = generated[:cut]
    for key in PER_TOKEN_KEYS:
        if key in inputs:  # the answer is text: type 0, attended
            fill = 1 if key == "attention_mask" else 0
            inputs[key] = torch.nn.functional.pad(torch.as_tensor(inputs[key]), (0, len(fed)), value=fill)
    with torch.no_grad():
        logits = upstream(input_ids=torch.tensor([ids + fed]), **inputs, use_cache=False).logits[0].float()
    scored = generated[: cut + 1]
    steps = logits[len(ids) - 1 : len(ids) - 1 + len(scored)].log_softmax(-1)
    return steps.gather(-1, torch.tensor(scored)[:, None])[:, 0]


def assert_matches_reference(upstream, request, output, max_new_tokens: int) -> None:
    """Tokens equal the plain class's greedy `generate`; log-probabilities equal one uncached forward (1e-5)."""
    ids, _ = split_request(request)
    assert output.error is None, output.error
    assert output.prompt_ids == ids
    reference = reference_tokens(upstream, request, max_new_tokens)
    if len(reference) < max_new_tokens:  # upstream stopped at the model's EOS; the engine runs with EOS disabled
        assert reference[-1] in _eos_ids(upstream), reference
    assert output.generated_tokens[: len(reference)] == reference
    expected = reference_logprobs(upstream, request, output.generated_tokens)
    torch.testing.assert_close(torch.tensor(output.logprobs[: len(expected)]), expected, atol=1e-5, rtol=0)


def _eos_ids(model) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set(eos) if isinstance(eos, list) else {eos}


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


def cb_pair(family: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(plain transformers model, a drop-in of its own), same weights."""
    if family == "llava":
        return llava_cb_pair()
    if family not in _MODELS:
        upstream, ours = model_pair(family)
        model = type(ours)(upstream.config).eval()
        model.load_state_dict(upstream.state_dict())
        _MODELS[family] = (upstream, model)
    upstream, model = _MODELS[family]
    model.encoder_cache.clear()
    return upstream, model
