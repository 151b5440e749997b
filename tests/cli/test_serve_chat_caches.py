"""A 5-turn, 2-image chat through `vlmprep serve`, in each server mode, at the physical minimum.

The chat app re-sends the whole conversation every turn (earlier images as base64 data URLs, earlier answers as the
server gave them). Each test's server runs in a subprocess of its own on 127.0.0.1 on a tiny image-sensitive LLaVA
checkpoint (the module starts them ahead, a few at once: `serve_client.ServerLaunches`). Every
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
    LaunchedServer,
    ServerLaunches,
    data_url,
    greedy_reply,
    needs_serving,
    post_chat,
    selected_tests,
    server_env,
    stop_gracefully,
    time_left,
)

from vlmprep.serving import SERVE_STATS_ENV
from vlmprep.testing.checkpoints import build_llava_checkpoint

# From the server's health to its last answer (its start has `serve_client.START_TIMEOUT_S`).
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


def _serve_chat(server: LaunchedServer, images, other_tenant: bool) -> tuple[list[str], dict]:
    urls = [data_url(image) for image in images]
    answers, messages = [], []
    server.wait_until_healthy()
    deadline = time.monotonic() + SERVER_DEADLINE_S
    for image_index, text in TURNS:
        image_part = lambda index: {"type": "image_url", "image_url": {"url": urls[index]}}  # noqa: E731
        messages.append(_user_message(image_index, text, image_part))
        payload = {"messages": messages, "temperature": 0, "max_tokens": MAX_NEW_TOKENS, "cache_salt": "alice"}
        status, answer = post_chat(f"{server.base_url}/v1/chat/completions", payload, deadline)
        assert status == 200, (answer, server.log.read_text())
        answers.append(answer)
        messages.append({"role": "assistant", "content": answer})
    if other_tenant:  # the last turn again, from another tenant
        payload = {**payload, "messages": messages[:-1], "cache_salt": "bob"}
        status, answer = post_chat(f"{server.base_url}/v1/chat/completions", payload, deadline)
        assert status == 200, (answer, server.log.read_text())
        answers.append(answer)
    stop_gracefully(server.process, min(SERVER_EXIT_TIMEOUT_S, time_left(deadline)))
    assert server.process.returncode == 0, server.log.read_text()
    (stats,) = json.loads(server.stats_path.read_text()).values()
    return answers, stats


# Each test's server: its flags after the checkpoint, by test and parameter
FIVE_TURN_SERVER_FLAGS = {
    "sequential": ["--log-level", "info"],
    "continuous_batching": ["--continuous-batching", "--log-level", "info"],
}
UUID_SERVER_FLAGS = {"sequential": [], "two_api_servers": ["--continuous-batching", "--api-server-count", "2"]}
# Upstream's 256-token pages, which an explicit `--cb-*` flag used to bring back, shared 0 tokens of this chat
ENGINE_SIZE_SERVER_FLAGS = {
    name: ["--continuous-batching", *flags, "--log-level", "info"]
    for name, flags in {
        "num_blocks": ["--cb-num-blocks", "256"],
        "max_batch_tokens": ["--cb-max-batch-tokens", "256"],
        "block_size": ["--cb-block-size", "32"],
    }.items()
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return build_llava_checkpoint(tmp_path_factory.mktemp("chat") / "checkpoint")


@pytest.fixture(scope="module")
def servers(request, checkpoint, tmp_path_factory):
    """A server for each test of the module the session runs (named by the test), started ahead, each writing its
    stats (`VLMPREP_SERVE_STATS`) when it stops."""
    flags_of_test = {
        "test_a_five_turn_image_chat_prefills_each_token_and_reads_each_image_once": FIVE_TURN_SERVER_FLAGS,
        "test_a_chat_naming_its_images_by_uuid_sends_each_image_once_and_only_to_its_tenant": UUID_SERVER_FLAGS,
        "test_the_engine_shares_a_chat_s_earlier_turns_whatever_flag_sizes_it": ENGINE_SIZE_SERVER_FLAGS,
    }
    launches = ServerLaunches()
    for test in selected_tests(request):
        (parameter,) = test.callspec.params.values()
        work = tmp_path_factory.mktemp("server")
        command = [sys.executable, "-m", "vlmprep.serving", str(checkpoint)]
        command += [*flags_of_test[test.originalname][parameter], "--host", "127.0.0.1", "--device", "cpu"]
        launches.add(
            test.name, command, server_env(**{SERVE_STATS_ENV: str(work / "stats.json")}), work / "server.log"
        )
    yield launches
    launches.close()


@pytest.fixture(scope="module")
def chat(checkpoint, servers):
    # After `servers`: the references are computed while the servers start
    images = _images()
    answers, minimum, last_prompt = _reference_chat(checkpoint, images)
    # The tiny model must be able to fail: its answers depend on the image (the same question, another image)
    other, _, _ = _reference_chat(checkpoint, images[::-1])
    assert other != answers
    return checkpoint, images, answers, minimum, last_prompt


@needs_serving
@pytest.mark.parametrize("mode", list(FIVE_TURN_SERVER_FLAGS))
def test_a_five_turn_image_chat_prefills_each_token_and_reads_each_image_once(request, chat, servers, mode):
    checkpoint, images, expected, minimum, last_prompt = chat
    sequential = mode == "sequential"
    with servers.take(request.node.name) as server:
        answers, stats = _serve_chat(server, images, sequential)
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
@pytest.mark.parametrize("mode", list(UUID_SERVER_FLAGS))
def test_a_chat_naming_its_images_by_uuid_sends_each_image_once_and_only_to_its_tenant(request, chat, servers, mode):
    checkpoint, images, expected, minimum, _ = chat
    sequential = mode == "sequential"
    urls = [data_url(image) for image in images]
    answers, turns, bodies = [], [], []
    with servers.take(request.node.name) as server:
        url, log = f"{server.base_url}/v1/chat/completions", server.log
        server.wait_until_healthy()
        deadline = time.monotonic() + SERVER_DEADLINE_S
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
        stop_gracefully(server.process, min(SERVER_EXIT_TIMEOUT_S, time_left(deadline)))
    assert server.process.returncode == 0, log.read_text()
    assert answers == expected
    # Each image's bytes travelled once, in the turn that showed it (turns 1 and 3)
    assert [sum(url in body for url in urls) for body in bodies] == [1, 0, 1, 0, 0]
    (stats,) = json.loads(server.stats_path.read_text()).values()  # the engine process's counters
    assert stats["drop_in"] and stats["item_refs"]["remembered"] == 2, stats
    assert stats["encoder_cache"]["misses"] == 2, stats["encoder_cache"]
    prefilled = stats["prefix_cache" if sequential else "engine_prefill"]["tokens_prefilled"]
    assert minimum <= prefilled <= 1.02 * minimum, (prefilled, minimum, stats)
    if sequential:  # one API server: its media cache decoded each image once
        assert stats["media_cache"]["decodes"] == 2, stats["media_cache"]


@needs_serving
@pytest.mark.parametrize("flag", list(ENGINE_SIZE_SERVER_FLAGS))
def test_the_engine_shares_a_chat_s_earlier_turns_whatever_flag_sizes_it(request, chat, servers, flag):
    checkpoint, images, expected, minimum, _ = chat
    with servers.take(request.node.name) as server:
        answers, stats = _serve_chat(server, images, False)
    assert answers == expected
    engine = stats["engine_prefill"]
    assert engine["tokens_shared"] > 0 and minimum <= engine["tokens_prefilled"] <= 1.02 * minimum, (minimum, engine)
