"""`generate_batch` with images (issue 13): every request's answer equals the plain transformers class's `generate`."""

from __future__ import annotations

import pytest
import torch
from cb_models import LlavaCB, assert_engine_matches_references, engine_config, greedy, llava_cb_pair
from cb_references import assert_matches_reference, image_run, pixels, reference_tokens
from transformers import ContinuousBatchingConfig, GenerationConfig

from vlmprep.batching import ItemRequestState
from vlmprep.testing import VisionRunCounter

MAX_NEW_TOKENS = 6


def mixed_requests(model) -> list:
    """0, 1 and 2 images per request, an image shared by two requests, a dict without images, a plain list."""
    image = image_run(model)
    return [
        {"input_ids": [1, 2, 3, *image, 4, 5], "pixel_values": pixels(1)},
        [7, 8, 9, 10],
        {"input_ids": [1, *image, 6, *image, 2, 3], "pixel_values": pixels(2, 3)},
        {"input_ids": [11, 12, *image, 13], "pixel_values": pixels(1)},  # the first request's image
        {"input_ids": [14, 15, 16]},
    ]


@pytest.mark.parametrize("max_batch_tokens", [8, 12, 64], ids=["budget8", "budget12", "budget64"])
def test_answers_equal_per_request_generate(max_batch_tokens):
    # A budget of 8 or 12 tokens splits every image prompt (21 to 38 tokens) across steps, and images across slices.
    upstream, ours = llava_cb_pair()
    requests = mixed_requests(ours)
    outputs = assert_engine_matches_references(upstream, ours, requests, MAX_NEW_TOKENS, max_batch_tokens)
    assert list(outputs) == [f"req_{i}" for i in range(len(requests))]


def test_processor_style_tensors():
    # A processor returns `(1, seq_len)` tensors and an all-ones attention mask for one request.
    upstream, ours = llava_cb_pair()
    ids = [1, 2, *image_run(ours), 3]
    request = {
        "input_ids": torch.tensor([ids]),
        "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        "pixel_values": pixels(5),
    }
    outputs = ours.generate_batch(
        [request], generation_config=greedy(4), continuous_batching_config=engine_config(), progress_bar=False
    )
    output = outputs["req_0"]
    assert output.error is None, output.error
    assert output.generated_tokens == reference_tokens(upstream, {"input_ids": ids, "pixel_values": pixels(5)}, 4)


def test_each_image_is_encoded_once_per_content():
    # The shared image is encoded once (the encoder cache serves its second request)
    upstream, ours = llava_cb_pair()
    with VisionRunCounter(ours) as runs:
        ours.generate_batch(
            mixed_requests(ours),
            generation_config=greedy(2),
            continuous_batching_config=engine_config(),
            progress_bar=False,
        )
    assert runs.images == 3  # seeds 1, 2, 3


def test_generated_placeholder_id_is_text():
    # A random model may answer with the placeholder id; `generate` decodes it as text, and so does the engine, also
    # in a step that feeds another request's image (see `step_encoder_outputs`).
    upstream, ours = llava_cb_pair()
    placeholder = ours.config.image_token_id
    prompts = torch.tensor([[a, b] for a in range(1, 100) for b in range(1, 100)])  # text ids only
    with torch.no_grad():
        answers = upstream(input_ids=prompts).logits[:, -1].argmax(-1)
    chosen = prompts[answers == placeholder].tolist()
    assert chosen, "no two-token prompt is answered with the placeholder id under these weights"
    requests = [chosen[0], {"input_ids": [1, *image_run(ours), 2], "pixel_values": pixels(4)}]
    outputs = ours.generate_batch(
        requests, generation_config=greedy(3), continuous_batching_config=engine_config(), progress_bar=False
    )
    for request, output in zip(requests, outputs.values(), strict=True):
        assert_matches_reference(upstream, request, output, 3)
    assert outputs["req_0"].generated_tokens[0] == placeholder


def test_parallel_samples_share_the_images():
    # `num_return_sequences` forks a request after its prefill; top-1 sampling makes every sample the greedy answer
    upstream, ours = llava_cb_pair()
    request = {"input_ids": [1, 2, *image_run(ours), 3], "pixel_values": pixels(1)}
    config = GenerationConfig(max_new_tokens=4, do_sample=True, top_k=1, eos_token_id=-1, num_return_sequences=2)
    outputs = ours.generate_batch(
        [request], generation_config=config, continuous_batching_config=engine_config(), progress_bar=False
    )
    assert list(outputs) == ["req_0__child#0", "req_0"]
    expected = reference_tokens(upstream, request, 4)
    assert [output.generated_tokens for output in outputs.values()] == [expected, expected]


def test_requests_restarted_under_cache_pressure(monkeypatch):
    # A cache too small for every request makes the engine restart some from scratch, their answers so far appended
    # to the prompt (`create_equivalent_initial_request`): the images stay where they were.
    upstream, ours = llava_cb_pair()
    restarted = []
    original = ItemRequestState.create_equivalent_initial_request

    def spy(state):
        restarted.append(state.request_id)
        return original(state)

    monkeypatch.setattr(ItemRequestState, "create_equivalent_initial_request", spy)
    requests = [{"input_ids": [1, 2, *image_run(ours), 3, seed], "pixel_values": pixels(seed)} for seed in range(1, 7)]
    cache = ContinuousBatchingConfig(max_batch_tokens=16, num_blocks=12, page_size=4, return_logprobs=True)
    outputs = ours.generate_batch(
        requests, generation_config=greedy(8), continuous_batching_config=cache, progress_bar=False
    )
    assert restarted
    for request, output in zip(requests, outputs.values(), strict=True):
        assert output.error is None, output.error
        assert output.prompt_ids == request["input_ids"]
        assert output.generated_tokens == reference_tokens(upstream, request, 8)


def test_inference_tensors():
    # A model built under `torch.inference_mode()` (a common serving pattern): its weights have no version counter,
    # which the encoder cache's identity read (and failed on); after a weight load the images are encoded again
    upstream, _ = llava_cb_pair()
    with torch.inference_mode():
        ours = LlavaCB(upstream.config).eval()
        ours.load_state_dict(upstream.state_dict())
    requests = mixed_requests(ours)
    with VisionRunCounter(ours) as runs:
        outputs = ours.generate_batch(
            requests, generation_config=greedy(3), continuous_batching_config=engine_config(), progress_bar=False
        )
        for request, output in zip(requests, outputs.values(), strict=True):
            assert_matches_reference(upstream, request, output, 3)
        changed = {
            key: value * 1.1 if value.is_floating_point() else value for key, value in ours.state_dict().items()
        }
        with torch.inference_mode():
            ours.load_state_dict(changed)
        encoded = runs.images
        outputs = ours.generate_batch(
            requests[:1], generation_config=greedy(3), continuous_batching_config=engine_config(), progress_bar=False
        )
    assert runs.images == encoded + 1
    reference = type(upstream)(upstream.config).eval()
    reference.load_state_dict(changed)
    assert_matches_reference(reference, requests[0], outputs["req_0"], 3)
