"""Shared pieces of the continuous-batching tests: drop-ins of their own (the engine keeps its manager on the
model), small engines and greedy configs, waiting on a manager. Requests and references from transformers are in
`cb_references.py` (imported from here too)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from cb_references import assert_matches_reference as assert_matches_reference
from cb_references import image_run as image_run
from cb_references import pixels as pixels
from cb_references import reference_tokens as reference_tokens
from transformers import ContinuousBatchingConfig, GenerationConfig

import vlmprep
from conftest import model_pair

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


def greedy(max_new_tokens: int) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=-1)


def engine_config(
    max_batch_tokens: int = 12, page_size: int = 4, num_blocks: int = 128, **kwargs
) -> ContinuousBatchingConfig:
    """A small engine: a budget shorter than the prompts (so they are split across steps), small pages."""
    return ContinuousBatchingConfig(
        max_batch_tokens=max_batch_tokens, num_blocks=num_blocks, page_size=page_size, return_logprobs=True, **kwargs
    )


def run_engine(ours, requests: list, max_new_tokens: int, max_batch_tokens: int = 8) -> dict:
    """`generate_batch`'s outputs of greedy answers of `max_new_tokens`, in a small engine of `max_batch_tokens`."""
    return ours.generate_batch(
        requests,
        generation_config=greedy(max_new_tokens),
        continuous_batching_config=engine_config(max_batch_tokens=max_batch_tokens),
        progress_bar=False,
    )


def assert_engine_matches_references(
    upstream, ours, requests: list, max_new_tokens: int, max_batch_tokens: int = 8
) -> dict:
    """Runs `requests` in the engine (`run_engine`): each answer equals the plain class's; returns the outputs."""
    outputs = run_engine(ours, requests, max_new_tokens, max_batch_tokens)
    for request, output in zip(requests, outputs.values(), strict=True):
        assert_matches_reference(upstream, request, output, max_new_tokens)
    return outputs


def wait_for(manager, request_id: str):
    """The finished output of one request of a running manager."""
    for output in manager.request_id_iter(request_id):
        if output.is_finished():
            return output
    raise AssertionError(f"The manager stopped before request {request_id} finished.")


def within(seconds: float, run: Callable[[], Any]) -> Any:
    """`run()`'s result, or a test failure once `seconds` have passed (a hang fails instead of stalling the suite).

    A run that hangs is left behind in a daemon thread: the failure is what matters.
    """
    result: dict[str, Any] = {}

    def target():
        try:
            result["value"] = run()
        except BaseException as error:  # noqa: BLE001 - raised again in the test's thread
            result["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"Did not finish within {seconds} s (a request that never finishes hangs its caller).")
    if "error" in result:
        raise result["error"]
    return result["value"]


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


@contextlib.contextmanager
def one_by_one(ours, max_new_tokens: int, max_batch_tokens: int = 64) -> Iterator[Callable[..., int]]:
    """An engine of `ours` running one request at a time, and the tokens each request's prompt feeds the decoder.

    Yields `run(reference, request, **kwargs)`: queues `request` (a prompt or a processor output, with `kwargs` for
    `add_request`), checks its answer against `reference` (the plain transformers class) and returns how many of its
    prompt tokens were computed (the rest were shared pages); `run.manager` is the engine's manager.
    """
    manager = ours.init_continuous_batching(
        generation_config=greedy(max_new_tokens),
        continuous_batching_config=engine_config(max_batch_tokens=max_batch_tokens),
    )
    fed = TokensFed(ours)

    def run(reference, request, **kwargs) -> int:
        queued = dict(request) if isinstance(request, Mapping) else request
        output = wait_for(manager, manager.add_request(queued, **kwargs))
        assert_matches_reference(reference, request, output, max_new_tokens)
        return fed.take() - (max_new_tokens - 1)  # the answer tokens after the first are decoded one by one

    run.manager = manager
    manager.start()
    try:
        yield run
    finally:
        fed.remove()
        manager.stop(block=True)


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
