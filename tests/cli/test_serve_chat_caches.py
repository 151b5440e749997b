"""A 5-turn, 2-image chat through `vlmprep serve`, in each server mode, at the physical minimum.

The chat app re-sends the whole conversation every turn (earlier images as base64 data URLs, earlier answers as the
server gave them). Each server runs in a subprocess on 127.0.0.1 on a tiny image-sensitive LLaVA checkpoint. Every
answer must be the plain transformers class's greedy answer to the same conversation, and the server's stats
(`VLMPREP_SERVE_STATS`) must show each image decoded once, hashed once and encoded once, and the prompt tokens
prefilled:

- sequential generation (the server's `PrefixCache`): at most 1.02x the minimum (the tokens no earlier turn computed);
- continuous batching (16-token shared pages, and the partly filled pages of earlier turns): at most 1.02x as well.

In the sequential mode the last turn is then sent again under another `cache_salt`: another tenant's request reuses
nothing (its images decoded, encoded and its prompt prefilled afresh) and gets the same answer.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import transformers
from PIL import Image
from serve_client import (
    MAX_NEW_TOKENS,
    data_url,
    free_loopback_port,
    greedy_reply,
    needs_serving,
    post_chat,
    server_env,
    server_process,
    stop_gracefully,
    time_left,
    wait_until_healthy,
)

from vlmprep.serving import SERVE_STATS_ENV
from vlmprep.testing.checkpoints import build_llava_checkpoint

SERVER_DEADLINE_S = 90
SERVER_EXIT_TIMEOUT_S = 15
# (image of the turn or None, the user's text)
TURNS = (
    (0, "What is in this picture?"),
    (None, "And the colors?"),
    (1, "Compare it with this one."),
    (None, "Which is brighter?"),
    (None, "Say it in one word."),
)


def _images() -> list[Image.Image]:
    generator = np.random.default_rng(0)
    return [Image.fromarray(generator.integers(0, 256, (16, 16, 3), dtype=np.uint8), mode="RGB") for _ in range(2)]


def _user_message(image_index, text: str, image_content) -> dict:
    content = [] if image_index is None else [image_content(image_index)]
    return {"role": "user", "content": [*content, {"type": "text", "text": text}]}


def _reference_chat(checkpoint: Path, images) -> tuple[list[str], int, int]:
    """The plain class's greedy answers, turn by turn, and the minimum prompt tokens a server must prefill: per turn,
    the tokens not in the longest common prefix with the previous turn's prompt and answer (whose last token was
    never fed to the model); and the last turn's prompt length."""
    processor = transformers.AutoProcessor.from_pretrained(checkpoint)
    model = transformers.LlavaForConditionalGeneration.from_pretrained(checkpoint).eval()
    messages, answers, minimum, previous = [], [], 0, []
    for image_index, text in TURNS:
        messages.append(_user_message(image_index, text, lambda index: {"type": "image", "image": images[index]}))
        prompt_ids, new_tokens = greedy_reply(model, processor, messages)
        prompt = prompt_ids[0].tolist()
        shared = 0
        while shared < min(len(prompt), len(previous) - 1) and prompt[shared] == previous[shared]:
            shared += 1
        minimum += len(prompt) - shared
        previous = prompt + new_tokens.tolist()
        answer = processor.decode(new_tokens, skip_special_tokens=True)
        answers.append(answer)
        messages.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    return answers, minimum, len(prompt)


def _serve_chat(
    tmp_path: Path, checkpoint: Path, images, extra_args: list[str], other_tenant: bool
) -> tuple[list[str], dict]:
    port = free_loopback_port()
    stats_path = tmp_path / "stats.json"
    env = server_env(**{SERVE_STATS_ENV: str(stats_path)})
    command = [sys.executable, "-m", "vlmprep.serving", str(checkpoint), *extra_args]
    command += ["--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--log-level", "info"]
    log = tmp_path / "server.log"
    urls = [data_url(image) for image in images]
    answers, messages = [], []
    with server_process(command, env, log) as server:
        deadline = time.monotonic() + SERVER_DEADLINE_S
        base_url = f"http://127.0.0.1:{port}"
        wait_until_healthy(base_url, server, log, deadline)
        for image_index, text in TURNS:
            image_part = lambda index: {"type": "image_url", "image_url": {"url": urls[index]}}  # noqa: E731
            messages.append(_user_message(image_index, text, image_part))
            payload = {"messages": messages, "temperature": 0, "max_tokens": MAX_NEW_TOKENS, "cache_salt": "alice"}
            status, answer = post_chat(f"{base_url}/v1/chat/completions", payload, deadline)
            assert status == 200, (answer, log.read_text())
            answers.append(answer)
            messages.append({"role": "assistant", "content": answer})
        if other_tenant:  # the last turn again, from another tenant
            payload = {**payload, "messages": messages[:-1], "cache_salt": "bob"}
            status, answer = post_chat(f"{base_url}/v1/chat/completions", payload, deadline)
            assert status == 200, (answer, log.read_text())
            answers.append(answer)
        stop_gracefully(server, min(SERVER_EXIT_TIMEOUT_S, time_left(deadline)))
    assert server.returncode == 0, log.read_text()
    (stats,) = json.loads(stats_path.read_text()).values()
    return answers, stats


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    directory = tmp_path_factory.mktemp("chat")
    checkpoint = build_llava_checkpoint(directory / "checkpoint")
    images = _images()
    answers, minimum, last_prompt = _reference_chat(checkpoint, images)
    # The tiny model must be able to fail: its answers depend on the image (the same question, another image)
    other, _, _ = _reference_chat(checkpoint, images[::-1])
    assert other != answers
    return checkpoint, images, answers, minimum, last_prompt


@needs_serving
@pytest.mark.parametrize("mode", ["sequential", "continuous_batching"])
def test_a_five_turn_image_chat_prefills_each_token_and_reads_each_image_once(tmp_path, chat, mode):
    checkpoint, images, expected, minimum, last_prompt = chat
    sequential = mode == "sequential"
    answers, stats = _serve_chat(
        tmp_path, checkpoint, images, [] if sequential else ["--continuous-batching"], sequential
    )
    assert answers == (expected + expected[-1:] if sequential else expected)
    media = stats["media_cache"]
    # 1 + 1 + 2 + 2 + 2 images sent, each image decoded and encoded once (and once more for the other tenant)
    assert (media["decodes"], media["decode_hits"]) == ((4, 6) if sequential else (2, 6)), media
    assert stats["encoder_cache"]["misses"] == (4 if sequential else 2), stats["encoder_cache"]
    # ... and its processed pixels hashed once: re-sent, its content hash comes with its media-cache entry
    hinted = stats["hinted_hashes"]
    assert (hinted["hashed"], hinted["hits"]) == ((4, 6) if sequential else (2, 6)), hinted
    if sequential:
        prefilled = stats["prefix_cache"]["tokens_prefilled"] - last_prompt  # the other tenant prefills it all
    else:  # whole 16-token pages alone prefilled 1.33x the minimum here (148 tokens); partly filled pages are shared
        prefilled = stats["engine_prefill"]["tokens_prefilled"]
    assert minimum <= prefilled <= 1.02 * minimum, (prefilled, minimum, stats)


def _uuid_part(index: int, url: str | None) -> dict:
    # vLLM's convention: the data with its id once, then the id alone
    return {"type": "image_url", "image_url": None if url is None else {"url": url}, "uuid": f"photo-{index}"}


@needs_serving
@pytest.mark.parametrize("mode", ["sequential", "two_api_servers"])
def test_a_chat_naming_its_images_by_uuid_sends_each_image_once_and_only_to_its_tenant(tmp_path, chat, mode):
    checkpoint, images, expected, minimum, _ = chat
    sequential = mode == "sequential"
    extra = [] if sequential else ["--continuous-batching", "--api-server-count", "2"]
    port, stats_path, log = free_loopback_port(), tmp_path / "stats.json", tmp_path / "server.log"
    command = [sys.executable, "-m", "vlmprep.serving", str(checkpoint), *extra]
    command += ["--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    urls = [data_url(image) for image in images]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    answers, turns, bodies = [], [], []
    with server_process(command, server_env(**{SERVE_STATS_ENV: str(stats_path)}), log) as server:
        deadline = time.monotonic() + SERVER_DEADLINE_S
        wait_until_healthy(f"http://127.0.0.1:{port}", server, log, deadline)
        for number, (image_index, text) in enumerate(TURNS):
            turns.append((image_index, text))
            messages = []
            for turn, (index, user_text) in enumerate(turns):
                # The image's bytes travel in the turn that shows it; every later turn names it by its id alone
                messages.append(
                    _user_message(
                        index, user_text, lambda i, new=turn == number: _uuid_part(i, urls[i] if new else None)
                    )
                )
                if turn < number:
                    messages.append({"role": "assistant", "content": answers[turn]})
            payload = {"messages": messages, "temperature": 0, "max_tokens": MAX_NEW_TOKENS, "cache_salt": "alice"}
            bodies.append(json.dumps(payload))
            status, answer = post_chat(url, payload, deadline)
            assert status == 200, (answer, log.read_text())
            answers.append(answer)
        # Another tenant cannot name alice's image, and an id nobody sent is unknown: a short 400 each
        for salt, uuid in (("bob", "photo-0"), ("alice", "photo-9")):
            part = {**_uuid_part(0, None), "uuid": uuid}
            stranger = {"messages": [_user_message(0, "What is it?", lambda _, part=part: part)]}
            status, body = post_chat(url, {**stranger, "max_tokens": 2, "cache_salt": salt}, deadline)
            assert status == 400 and "unknown or expired" in body and len(body) < 400, (salt, status, body)
        stop_gracefully(server, min(SERVER_EXIT_TIMEOUT_S, time_left(deadline)))
    assert server.returncode == 0, log.read_text()
    assert answers == expected
    # Each image's bytes travelled once, in the turn that showed it (turns 1 and 3)
    assert [sum(url in body for url in urls) for body in bodies] == [1, 0, 1, 0, 0]
    (stats,) = json.loads(stats_path.read_text()).values()  # the engine process's counters
    assert stats["drop_in"] and stats["item_refs"]["remembered"] == 2, stats
    assert stats["encoder_cache"]["misses"] == 2, stats["encoder_cache"]
    prefilled = stats["prefix_cache" if sequential else "engine_prefill"]["tokens_prefilled"]
    assert minimum <= prefilled <= 1.02 * minimum, (prefilled, minimum, stats)
    if sequential:  # one API server: its media cache decoded each image once
        assert stats["media_cache"]["decodes"] == 2, stats["media_cache"]


@needs_serving
@pytest.mark.parametrize(
    "flags",
    [["--cb-num-blocks", "256"], ["--cb-max-batch-tokens", "256"], ["--cb-block-size", "32"]],
    ids=["num_blocks", "max_batch_tokens", "block_size"],
)
def test_the_engine_shares_a_chat_s_earlier_turns_whatever_flag_sizes_it(tmp_path, chat, flags):
    # Upstream's 256-token pages, which an explicit `--cb-*` flag used to bring back, shared 0 tokens of this chat
    checkpoint, images, expected, minimum, _ = chat
    answers, stats = _serve_chat(tmp_path, checkpoint, images, ["--continuous-batching", *flags], False)
    assert answers == expected
    engine = stats["engine_prefill"]
    assert engine["tokens_shared"] > 0 and minimum <= engine["tokens_prefilled"] <= 1.02 * minimum, (minimum, engine)
