"""Requests of the continuous-batching tests and what the plain transformers class answers them: images from seeds,
an image's placeholder run, greedy reference tokens and log-probabilities, and the check of an engine output."""

from __future__ import annotations

import torch

from vlmprep.testing import random_pixels


def pixels(*seeds: int) -> torch.Tensor:
    """One image per seed (equal seeds, equal images)."""
    return torch.cat([random_pixels(1, seed=seed) for seed in seeds])


def image_run(model) -> list[int]:
    """The placeholder run of one image."""
    return [model.config.image_token_id] * 16


# The per-token inputs a reference extends over the answer's tokens.
ANSWER_EXTENDED_KEYS = ("token_type_ids", "mm_token_type_ids", "attention_mask")


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
    # input stops before the first one (its own step is still scored; later steps are checked by the tokens). So does
    # an answered audio start: the Qwen2.5-Omni thinker's `get_rope_index` counts one as a clip, with no clip to match.
    names = ("image_token_id", "video_token_id", "audio_token_id", "audio_start_token_id")
    placeholders = {getattr(upstream.config, name, None) for name in names}
    cut = next((step for step, token in enumerate(generated) if token in placeholders), len(generated))
    fed = generated[:cut]
    for key in ANSWER_EXTENDED_KEYS:
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
