"""Every transformers entry point of continuous batching takes images: the manager and paged `generate`."""

from __future__ import annotations

import pytest
import torch
from cb_models import engine_config, greedy, llava_cb_pair, wait_for
from cb_references import assert_matches_reference, image_run, pixels, reference_tokens

from vlmprep.batching import ItemBatchingManager
from vlmprep.testing import VisionRunCounter


def test_manager_add_request_with_pixels():
    # Upstream: `Unknown logit_processor_kwargs: {'pixel_values'}`
    upstream, ours = llava_cb_pair()
    image = image_run(ours)
    requests = [
        {"input_ids": [1, 2, *image, 3], "pixel_values": pixels(1)},
        {"input_ids": [4, *image, 5, *image, 6], "pixel_values": pixels(2, 1)},
        {"input_ids": [7, 8, 9]},
    ]
    manager = ours.init_continuous_batching(generation_config=greedy(4), continuous_batching_config=engine_config())
    assert isinstance(manager, ItemBatchingManager)
    with VisionRunCounter(ours) as runs:
        # Queued before the loop starts: admitted together, in one batched vision call of the 2 distinct images
        first = manager.add_request(requests[0]["input_ids"], pixel_values=requests[0]["pixel_values"])
        second = manager.add_request(requests[1])  # a whole processor output
        third = manager.add_request(requests[2]["input_ids"])
        manager.start()
        try:
            outputs = [wait_for(manager, request_id) for request_id in (first, second, third)]
        finally:
            manager.stop(block=True)
    assert (runs.calls, runs.images) == (1, 2)
    for request, output in zip(requests, outputs, strict=True):
        assert_matches_reference(upstream, request, output, 4)


def test_manager_takes_the_engine_config_a_generation_config_carries():
    # Upstream still reads (deprecated) `generation_config.continuous_batching_config` when none is passed.
    _, ours = llava_cb_pair()
    generation_config = greedy(2)
    carried = engine_config(max_batch_tokens=9)
    generation_config.continuous_batching_config = carried
    manager = ours.init_continuous_batching(generation_config=generation_config)
    try:
        assert isinstance(manager, ItemBatchingManager)
        assert manager.continuous_batching_config.max_batch_tokens == 9  # not the default
    finally:
        ours.destroy_cached_continuous_batching_manager()


def test_manager_refuses_a_bad_request_at_once():
    upstream, ours = llava_cb_pair()
    manager = ours.init_continuous_batching(generation_config=greedy(2), continuous_batching_config=engine_config())
    with pytest.raises(ValueError, match="2 image\\(s\\) were passed but the prompt has 1"):
        manager.add_request([1, *image_run(ours), 2], pixel_values=pixels(1, 2))
    with pytest.raises(ValueError, match="Unknown request inputs \\['pixel_value'\\]"):
        manager.add_request([1, *image_run(ours), 2], pixel_value=pixels(1))
    assert manager.input_queue.empty()


def test_paged_generate_with_images():
    # Upstream's `generate(..., cache_implementation="paged")` calls `generate_batch` with the batch's rows and the
    # rest of the kwargs: each row becomes a request with its own images (placeholder order).
    upstream, ours = llava_cb_pair()
    image = image_run(ours)
    rows = [
        [1, 2, *image, 3, 4, *image, 5],
        [6, *image, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26],
    ]
    pixel_values = pixels(1, 2, 3)
    sequences = ours.generate(
        input_ids=torch.tensor(rows),
        pixel_values=pixel_values,
        cache_implementation="paged",
        max_new_tokens=4,
        do_sample=False,
        continuous_batching_config=engine_config(),
    )
    assert sequences.shape == (1, 2, len(rows[0]) + 4)  # what upstream returns
    assert sequences[0, 0].tolist() == rows[0] + reference_tokens(
        upstream, {"input_ids": rows[0], "pixel_values": pixel_values[:2]}, 4
    )
    assert sequences[0, 1].tolist() == rows[1] + reference_tokens(
        upstream, {"input_ids": rows[1], "pixel_values": pixel_values[2:]}, 4
    )


def test_paged_generate_refuses_padding():
    upstream, ours = llava_cb_pair()
    rows = torch.tensor([[0, 1, *image_run(ours)], [1, 2, *image_run(ours)]])
    mask = torch.ones_like(rows)
    mask[0, 0] = 0
    with pytest.raises(ValueError, match="cannot drop padding"):
        ours.generate(input_ids=rows, attention_mask=mask, pixel_values=pixels(1, 2), cache_implementation="paged")


def test_requests_added_while_the_engine_runs_are_encoded_before_they_are_scheduled():
    # Requests added from several threads while the loop runs: none may reach upstream's scheduler before its images
    # are encoded (the loop drains upstream's queue at any time).
    import threading

    upstream, ours = llava_cb_pair()
    image = image_run(ours)
    manager = ours.init_continuous_batching(generation_config=greedy(3), continuous_batching_config=engine_config())
    manager.start()
    requests, request_ids, lock = [], [], threading.Lock()

    def add(seed: int) -> None:
        request = {"input_ids": [1, 2, *image, 3], "pixel_values": pixels(seed)}
        request_id = manager.add_request(request)
        with lock:
            requests.append(request)
            request_ids.append(request_id)

    outputs = []
    try:
        seed = 0
        for round_size in (1, 4, 8):
            threads = [threading.Thread(target=add, args=(seed + index,)) for index in range(round_size)]
            seed += round_size
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            # This round's requests (a finished request's output is delivered once)
            outputs += [wait_for(manager, request_id) for request_id in request_ids[len(outputs) :]]
    finally:
        manager.stop(block=True)
    assert len(outputs) == 13
    for request, output in zip(requests, outputs, strict=True):
        assert_matches_reference(upstream, request, output, 3)
