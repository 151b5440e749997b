"""A bad request fails alone, with an error that names the problem and the fix; the others keep running."""

from __future__ import annotations

import torch
from cb_models import LlavaCB, engine_config, greedy, llava_cb_pair, wait_for
from cb_references import assert_matches_reference, image_run, pixels
from transformers.generation.continuous_batching.requests import RequestStatus

from vlmprep.batching.admission import encode_admitted
from vlmprep.batching.prompt import build_item_prompt


def test_bad_requests_of_generate_batch_fail_alone():
    upstream, ours = llava_cb_pair()
    image = image_run(ours)
    good = [
        {"input_ids": [1, 2, *image, 3], "pixel_values": pixels(1)},
        [4, 5, 6],
        {"input_ids": [7, *image, 8, *image], "pixel_values": pixels(2, 3)},
    ]
    nan_pixels = pixels(4)
    nan_pixels[0, 0, 0, 0] = float("nan")
    bad = {
        "two images for one run": ({"input_ids": [1, *image], "pixel_values": pixels(1, 2)}, "2 image(s) were passed"),
        "placeholders without pixels": ([1, *image, 2], "no pixel inputs were passed"),
        "not finite": ({"input_ids": [1, *image], "pixel_values": nan_pixels}, "NaN or infinite"),
        "wrong size": (
            {"input_ids": [1, *image], "pixel_values": torch.zeros(1, 3, 8, 8)},
            "takes (num_images, 3, 16, 16)",
        ),
        "unknown input": ({"input_ids": [1, 2], "pixel_value": pixels(1)}, "Unknown request inputs ['pixel_value']"),
        "padded": ({"input_ids": [0, 1, 2], "attention_mask": [0, 1, 1]}, "must be all ones"),
    }
    requests = [good[0], *[request for request, _ in bad.values()], good[1], good[2]]
    outputs = list(
        ours.generate_batch(
            requests, generation_config=greedy(3), continuous_batching_config=engine_config(), progress_bar=False
        ).values()
    )
    assert len(outputs) == len(requests)
    for output, (name, (_, message)) in zip(outputs[1:-2], bad.items(), strict=True):
        assert output.status == RequestStatus.FAILED, name
        assert message in output.error, (name, output.error)
    for request, output in zip(good, [outputs[0], *outputs[-2:]], strict=True):
        assert_matches_reference(upstream, request, output, 3)


def failing_model():
    """A LLaVA whose vision tower fails on one image's pixels (`model.poisoned`), and only on them.

    Any encoder call holding those pixels fails, as a vision tower may fail on one input of a batch.
    """
    upstream, ours = llava_cb_pair()
    model = LlavaCB(ours.config).eval()
    model.load_state_dict(ours.state_dict())
    model.poisoned = None
    encode = model.model.get_image_features

    def failing_encode(pixel_values, *args, **kwargs):
        if model.poisoned is not None and any(torch.equal(image, model.poisoned) for image in pixel_values):
            raise ValueError("this image cannot be encoded")
        return encode(pixel_values, *args, **kwargs)

    model.model.get_image_features = failing_encode  # this instance only
    return upstream, model


def test_admission_failure_is_isolated_in_one_batched_call():
    upstream, model = failing_model()
    image = image_run(model)
    prompts = [build_item_prompt(model, [1, *image], {"pixel_values": pixels(seed)}) for seed in (1, 2, 3)]
    model.poisoned = pixels(2)[0]
    errors = encode_admitted(model, [prompt.items for prompt in prompts])
    assert [error is None for error in errors] == [True, False, True]
    assert "cannot be encoded" in str(errors[1])
    assert prompts[0].items.features is not None and prompts[2].items.features is not None


def test_admission_failure_fails_that_request_and_the_engine_keeps_serving():
    upstream, model = failing_model()
    image = image_run(model)
    requests = [{"input_ids": [1, 2, *image, 3], "pixel_values": pixels(seed)} for seed in (1, 2, 3)]
    model.poisoned = pixels(2)[0]
    manager = model.init_continuous_batching(generation_config=greedy(3), continuous_batching_config=engine_config())
    request_ids = [manager.add_request(request) for request in requests]
    manager.start()
    try:
        outputs = [wait_for(manager, request_id) for request_id in request_ids]
        later = {"input_ids": [4, *image], "pixel_values": pixels(5)}  # the engine still takes requests
        outputs.append(wait_for(manager, manager.add_request(later)))
    finally:
        manager.stop(block=True)
    assert outputs[1].status == RequestStatus.FAILED and "cannot be encoded" in outputs[1].error
    for request, output in zip([requests[0], requests[2], later], [outputs[0], outputs[2], outputs[3]], strict=True):
        assert_matches_reference(upstream, request, output, 3)
