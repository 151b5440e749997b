"""`vlmprep serve --continuous-batching`: image chats go through transformers' continuous-batching engine, exactly.

A loopback load test: the server runs in a subprocess on a tiny image-sensitive LLaVA checkpoint (a family the engine
runs exactly with images); 16 chats are sent at once from threads (base64 data URLs and file URLs, one or two images,
images shared across chats, half of them streamed), with 2 bad requests mixed in. Every answer must be the plain
transformers class's greedy answer to the same chat, no request may be lost, the bad ones get HTTP 400, and the server
log must show that the chats ran in continuous batching.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from PIL import Image
from serve_client import (
    MAX_NEW_TOKENS,
    data_url,
    launched_server,
    needs_serving,
    post_chat,
    server_env,
    stop_gracefully,
    time_left,
    transformers_answer,
)

from vlmprep.serving import SERVE_STATS_ENV
from vlmprep.testing.checkpoints import build_llava_checkpoint

NUM_CHATS = 16
QUESTIONS = ("What is in this picture?", "Describe the colors you see.")
# From the server's health to its last answer (its start has `serve_client.START_TIMEOUT_S`).
SERVER_DEADLINE_S = 75
SERVER_EXIT_TIMEOUT_S = 10


def _random_images(count: int) -> list[Image.Image]:
    generator = np.random.default_rng(0)
    return [Image.fromarray(generator.integers(0, 256, (16, 16, 3), dtype=np.uint8), mode="RGB") for _ in range(count)]


def _chats(images: list[Image.Image], image_dir: Path) -> list[tuple[list[int], str]]:
    """16 chats as (image indices, question): one or two images each, every image in several chats."""
    for index, image in enumerate(images):
        image.save(image_dir / f"image_{index}.png")
    chats = []
    for number in range(NUM_CHATS):
        indices = [number % len(images)] if number % 3 else [number % len(images), (number + 1) % len(images)]
        chats.append((indices, QUESTIONS[number % 2]))
    return chats


def _payload(indices: list[int], question: str, images, image_dir: Path, stream: bool) -> dict:
    # Even images travel as base64 data URLs, odd ones as file URLs.
    parts = [
        {
            "type": "image_url",
            "image_url": {
                "url": data_url(images[index]) if index % 2 == 0 else (image_dir / f"image_{index}.png").as_uri()
            },
        }
        for index in indices
    ]
    return {
        "messages": [{"role": "user", "content": [*parts, {"type": "text", "text": question}]}],
        "temperature": 0,
        "max_tokens": MAX_NEW_TOKENS,
        "stream": stream,
    }


def _transformers_answers(checkpoint: Path, images, chats) -> list[str]:
    """The plain transformers class's greedy answers, decoded as transformers serve decodes them."""
    processor = transformers.AutoProcessor.from_pretrained(checkpoint)
    model = transformers.LlavaForConditionalGeneration.from_pretrained(checkpoint).eval()
    answers = {}
    for indices, question in chats:
        key = (tuple(indices), question)
        if key in answers:
            continue
        answers[key] = transformers_answer(model, processor, [images[index] for index in indices], question)
    return [answers[(tuple(indices), question)] for indices, question in chats]


@needs_serving
def test_concurrent_image_chats_run_in_continuous_batching_exactly(tmp_path):
    checkpoint = build_llava_checkpoint(tmp_path / "checkpoint")
    stats_path = tmp_path / "stats.json"
    env = server_env(**{SERVE_STATS_ENV: str(stats_path)})
    command = [
        *(sys.executable, "-m", "vlmprep.serving", str(checkpoint), "--continuous-batching"),
        *("--host", "127.0.0.1", "--device", "cpu", "--log-level", "info"),
        *("--allowed-local-media-path", str(tmp_path / "images")),  # the file URLs' directory, and no other
    ]
    log = tmp_path / "server.log"
    image_dir = tmp_path / "images"
    image_dir.mkdir()
    images = _random_images(4)
    chats = _chats(images, image_dir)
    payloads = [
        _payload(indices, question, images, image_dir, number % 2 == 1)
        for number, (indices, question) in enumerate(chats)
    ]
    undecodable = _payload([0], QUESTIONS[0], images, image_dir, stream=False)
    undecodable["messages"][0]["content"][0]["image_url"]["url"] = "data:image/png;base64,bm90IGFuIGltYWdl"
    # One image sent, two placeholders in the prompt (the second written in the text)
    mismatch = _payload([1], "<image_soft_token> " + QUESTIONS[0], images, image_dir, stream=False)
    bad = {NUM_CHATS // 3: undecodable, 2 * NUM_CHATS // 3: mismatch}
    for position, payload in sorted(bad.items()):  # ascending: each lands at its position in the final list
        payloads.insert(position, payload)
    with launched_server(command, env, log) as server:
        # The references are computed while the server starts (it spends that time importing).
        expected = _transformers_answers(checkpoint, images, chats)
        # The tiny model must be able to fail: answers that ignored the images would all be the same per question.
        assert len(set(expected)) > len(QUESTIONS)
        server.wait_until_healthy()
        deadline = time.monotonic() + SERVER_DEADLINE_S
        results: dict[int, tuple[int, str]] = {}

        def send(number: int, payload: dict) -> None:
            results[number] = post_chat(f"{server.base_url}/v1/chat/completions", payload, deadline)

        threads = [threading.Thread(target=send, args=item) for item in enumerate(payloads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=time_left(deadline))
        stop_gracefully(server.process, SERVER_EXIT_TIMEOUT_S)

    server_log = log.read_text()
    assert len(results) == len(payloads), server_log  # no request lost
    bad_positions = set(bad)
    bad_results = [results[position] for position in sorted(bad_positions)]
    assert [status for status, _ in bad_results] == [400, 400], bad_results
    assert "image 1 of the request" in bad_results[0][1] and "image" in bad_results[1][1].lower(), bad_results
    answers = [results[number] for number in range(len(payloads)) if number not in bad_positions]
    assert [status for status, _ in answers] == [200] * NUM_CHATS, answers
    assert [text for _, text in answers] == expected
    # The engine process ran the drop-in in vlmprep's batched runner: every chat went through continuous batching
    # (the two refused requests never reached it)
    served = json.loads(stats_path.read_text())[str(checkpoint)]
    assert served["drop_in"] and served["runner"] == "VisionPrepCBGenerateRunner", served
    assert served["engine_prefill"]["requests"] == NUM_CHATS, served


@needs_serving
def test_continuous_batching_takes_image_chats_only_of_drop_ins_the_engine_runs_exactly(monkeypatch):
    import vlmprep
    from vlmprep.serving import runners
    from vlmprep.serving.loader import VisionPrepGenerationState
    from vlmprep.serving.policy import DEFAULT_LIMITS
    from vlmprep.testing import tiny_gemma3_config, tiny_llava_config, tiny_paligemma_config

    # The API server says yes for any drop-in type: whether the engine runs its images needs the loaded model
    state = VisionPrepGenerationState(continuous_batching=True)
    assert state.use_continuous_batching(tiny_llava_config(), None)
    assert not VisionPrepGenerationState(continuous_batching=False).use_continuous_batching(tiny_llava_config(), None)
    # The engine process decides on the loaded model (the batched runner itself starts an engine: a stand-in here)
    monkeypatch.setattr(runners, "VisionPrepCBGenerateRunner", lambda *args, **kwargs: "batched")
    services = runners.EngineServices(DEFAULT_LIMITS)

    def runner(model):
        chosen = runners.runner_for(model, None, lambda *results: None, services)
        return chosen if chosen == "batched" else type(chosen).__name__

    assert runner(vlmprep.LlavaForConditionalGeneration(tiny_llava_config())) == "batched"
    # Gemma3's bidirectional image blocks run in the engine with sdpa or eager attention, not with flash (no mask)
    gemma3 = vlmprep.Gemma3ForConditionalGeneration(tiny_gemma3_config())
    assert runner(gemma3) == "batched"
    gemma3.config._attn_implementation = "flash_attention_2"  # set, not loaded: no flash kernel is needed on CPU
    assert runner(gemma3) == "VisionPrepGenerateRunner"
    # PaliGemma's whole prefix is bidirectional: the engine refuses it, its chats stay sequential
    assert runner(vlmprep.PaliGemmaForConditionalGeneration(tiny_paligemma_config())) == "VisionPrepGenerateRunner"


@needs_serving
def test_the_server_refuses_to_start_when_an_upstream_hook_is_missing(monkeypatch):
    from vlmprep.serving.server import check_server_hooks
    from vlmprep.utils import _engine_compat

    problem = "transformers.cli.serving.model_manager:EngineClient.run_engine no longer builds GenerateRunner"
    monkeypatch.setattr(_engine_compat, "missing_engine_hooks", lambda include_server=True: [problem])
    with pytest.raises(RuntimeError, match="no longer builds GenerateRunner"):
        check_server_hooks()


@needs_serving
def test_the_sequential_runner_gives_a_drop_in_the_engine_s_caches_and_a_transformers_class_none():
    import vlmprep
    from vlmprep.serving.policy import DEFAULT_LIMITS
    from vlmprep.serving.runners import EngineServices, VisionPrepGenerateRunner
    from vlmprep.testing import tiny_llava_config

    services = EngineServices(DEFAULT_LIMITS)
    inputs = {"input_ids": torch.tensor([[1, 5, 6, 7]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    settings = {"max_new_tokens": 3, "do_sample": False, "eos_token_id": None}
    for model_class, reaches in (
        (vlmprep.LlavaForConditionalGeneration, True),
        (transformers.LlavaForConditionalGeneration, False),
    ):
        model = model_class(tiny_llava_config()).eval()
        done = threading.Event()
        results = []

        def send_results(ids, tokens, finished, results=results, done=done):
            results.extend(finished)
            done.set()

        before = services.prefix_cache.stats.tokens_prefilled
        runner = VisionPrepGenerateRunner(model, None, send_results, services)
        runner.generate(1, {**inputs, "cache_salt": "tenant"}, dict(settings), stream=False)
        assert done.wait(60)
        ((request_id, generated),) = results
        assert request_id == 1 and isinstance(generated, list) and len(generated) == 3, generated
        assert (services.prefix_cache.stats.tokens_prefilled > before) is reaches
