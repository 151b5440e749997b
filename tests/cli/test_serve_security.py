"""`vlmprep serve` attacked over loopback: one test per finding of the security review, and a load test.

One server per mode for the module (`vlmprep serve <tiny LLaVA>`, with `--continuous-batching` and without; default
policy plus `--allowed-media-domains localhost`), each started once, together with the one server of other flags, all up
before the first test (`serve_client.ServerLaunches`: none starts while a test times answers). After every attack the server must still answer `/health` within
1 s and answer the next good chat exactly as the plain transformers class does. Internal fetches aim at a tiny HTTP
server on 127.0.0.1 started here; nothing leaves the machine.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import transformers
from PIL import Image
from serve_client import (
    MAX_NEW_TOKENS,
    QUESTION,
    ServerLaunches,
    data_url,
    free_loopback_port,
    huge_png_header,
    needs_serving,
    selected_tests,
    server_env,
    time_left,
    transformers_answer,
)

from vlmprep.testing.checkpoints import build_llava_checkpoint

REQUEST_TIMEOUT_S = 60
HEALTH_LIMIT_S = 1.0
# The server's resident memory after the load test: a tiny model, torch and the engine sized from the model. Upstream's
# default engine took 60% of the RAM (13 GB on the machine of the review).
MAX_SERVER_RSS_BYTES = 3 * 1024**3


def _images(count: int, seed: int = 0) -> list[Image.Image]:
    generator = np.random.default_rng(seed)
    return [Image.fromarray(generator.integers(0, 256, (16, 16, 3), dtype=np.uint8), mode="RGB") for _ in range(count)]


def chat(image_urls: list[str], question: str = QUESTION, **fields) -> dict:
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in image_urls]
    content = [*parts, {"type": "text", "text": question}]
    return {
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": MAX_NEW_TOKENS,
        **fields,
    }


@dataclass
class Served:
    base_url: str
    process: subprocess.Popen
    log: Path
    processor: object
    model: object
    images: list

    def post(self, path: str, body, headers: dict | None = None, timeout: float = REQUEST_TIMEOUT_S):
        """(status, text, response headers); `body` is JSON-encoded unless it is bytes."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path, data=data, headers={"Content-Type": "application/json", **(headers or {})}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read().decode(), response.headers
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(), error.headers

    def expected(self, image: Image.Image, question: str = QUESTION) -> str:
        """The plain transformers class's greedy answer, decoded as transformers serve decodes it."""
        return transformers_answer(self.model, self.processor, [image], question)

    def health_seconds(self) -> float:
        started = time.monotonic()
        with urllib.request.urlopen(self.base_url + "/health", timeout=5) as response:
            assert response.status == 200
        return time.monotonic() - started

    def assert_still_serving(self) -> None:
        """`/health` within 1 s, and a good chat answered exactly."""
        assert self.health_seconds() < HEALTH_LIMIT_S
        image = self.images[0]
        status, text, _ = self.post("/v1/chat/completions", chat([data_url(image)]))
        assert status == 200, text
        assert json.loads(text)["choices"][0]["message"]["content"] == self.expected(image)


# Each way the server runs: the engine batching, one generation at a time, and two API server processes in front of
# one engine process (each request lands on either; the item store and caches live in the engine).
SERVER_MODES = {
    "continuous-batching": ["--continuous-batching"],
    "sequential": [],
    "two-api-servers": ["--continuous-batching", "--api-server-count", "2"],
}
# The server of test_slow_fetches_and_templates_run_off_the_event_loop: internal fetches and request templates allowed
SLOW_WORK_FLAGS = ["--allowed-media-domains", "localhost", "--allow-private-media-addresses"]
SLOW_WORK_FLAGS += ["--media-fetch-timeout", "2", "--allow-request-chat-template"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return build_llava_checkpoint(tmp_path_factory.mktemp("serve-security") / "checkpoint")


@pytest.fixture(scope="module")
def servers(request, checkpoint, tmp_path_factory):
    """The servers of the tests the session runs, named by their mode (`SERVER_MODES`) or "slow work", started
    together."""
    if needs_serving.args[0]:
        pytest.skip(needs_serving.kwargs["reason"])
    flags = {}
    for test in selected_tests(request):
        parameters = test.callspec.params if hasattr(test, "callspec") else {}
        if "served" in parameters:
            # localhost is an allowed domain here, but it resolves to a loopback address: refused by default
            flags[parameters["served"]] = [*SERVER_MODES[parameters["served"]], "--allowed-media-domains", "localhost"]
        elif test.originalname == "test_slow_fetches_and_templates_run_off_the_event_loop":
            flags["slow work"] = SLOW_WORK_FLAGS
    launches = ServerLaunches(max_running=len(flags))
    for name, server_flags in flags.items():
        work = tmp_path_factory.mktemp("server")
        command = [sys.executable, "-m", "vlmprep.serving", str(checkpoint), "--device", "cpu"]
        command += ["--host", "127.0.0.1", "--log-level", "info", *server_flags]
        launches.add(name, command, server_env(), work / "server.log")
    yield launches
    launches.close()


@pytest.fixture(scope="module")
def reference(checkpoint, servers) -> tuple:
    """The plain transformers model beside the servers, for the references: (processor, model), loaded while they
    start."""
    processor = transformers.AutoProcessor.from_pretrained(checkpoint)
    return processor, transformers.LlavaForConditionalGeneration.from_pretrained(checkpoint).eval()


@contextlib.contextmanager
def _serving(servers: ServerLaunches, name: str, reference: tuple) -> Iterator[Served]:
    """The server named `name` in `servers`, with the plain transformers model beside it; stopped on the way out. It
    comes once every server of the module is up: none starts while a test times the answers."""
    servers.wait_until_all_healthy()
    with servers.take(name) as server:
        try:
            yield Served(server.base_url, server.process, server.log, *reference, _images(4))
        finally:
            server.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):  # `take` kills it then
                server.process.wait(timeout=20)


@pytest.fixture(scope="module", params=list(SERVER_MODES))
def served(request, servers, reference):
    with _serving(servers, request.param, reference) as served:
        yield served


class _CountingHandler(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        _CountingHandler.hits.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def _assert_client_error(status: int, text: str, *, match: str | None = None, name: str = "") -> None:
    assert 400 <= status < 500, (name, status, text[:300])
    assert len(text) < 1000, text[:300]  # never the input echoed back
    if match is not None:
        assert match in text, text


def test_finding_1_local_files_are_not_read(served, tmp_path):
    served.images[0].save(tmp_path / "image.png")
    answers = set()
    for url in ("/etc/passwd", str(tmp_path / "image.png"), (tmp_path / "image.png").as_uri(), "/no/such.png"):
        status, text, _ = served.post("/v1/chat/completions", chat([url]))
        _assert_client_error(status, text, match="allowed-local-media-path")
        answers.add(text)
    assert len(answers) == 1  # the same answer whether the file exists or not
    served.assert_still_serving()


def test_finding_2_internal_addresses_are_not_fetched(served):
    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CountingHandler)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    port = listener.server_address[1]
    try:
        urls = {
            f"http://localhost:{port}/image.png": "private, loopback",  # an allowed domain, a loopback address
            f"http://127.0.0.1:{port}/image.png": "allowed-media-domains",
            "http://169.254.169.254/latest/meta-data": "allowed-media-domains",
            f"http://localhost:{free_loopback_port()}/closed": "private, loopback",  # a closed port: same answer
        }
        for url, reason in urls.items():
            started = time.monotonic()
            status, text, _ = served.post("/v1/chat/completions", chat([url]))
            _assert_client_error(status, text, match=reason)
            assert time.monotonic() - started < 5
        assert _CountingHandler.hits == []
    finally:
        listener.shutdown()
        listener.server_close()
    served.assert_still_serving()


def test_finding_3_work_per_request_is_bounded(served):
    image_url = data_url(served.images[1])
    bomb = "data:image/png;base64," + base64.b64encode(huge_png_header()).decode()
    attacks = {
        "pixels": (chat([bomb]), "12000x12000"),
        "images": (chat([image_url] * 9), "max-images-per-request"),
        "prompt": (chat([image_url], "red " * 2100), "takes at most 2048"),
        "template": (
            chat([image_url], chat_template_kwargs={"chat_template": "{% for i in range(9) %}{% endfor %}"}),
            "chat_template",
        ),
        "tokens": (chat([image_url], max_tokens=10**9), "max_tokens"),
        "big data URL": (chat(["data:image/png;base64," + "A" * (20 * 1024 * 1024)]), "max-media-bytes"),
    }
    for name, (payload, reason) in attacks.items():
        status, text, _ = served.post("/v1/chat/completions", payload)
        _assert_client_error(status, text, match=reason)
        assert served.health_seconds() < HEALTH_LIMIT_S, name
    served.assert_still_serving()


def test_finding_3_a_client_that_leaves_stops_its_generation(served):
    body = json.dumps(chat([data_url(served.images[2])], max_tokens=4000)).encode()
    port = int(served.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        connection.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(1.5)  # generating by now
    deadline = time.monotonic() + 10
    while "A client left before its answer" not in served.log.read_text():
        time_left(deadline)
        time.sleep(0.2)
    # Sequentially, an unstopped generation of 4000 tokens would hold the model for tens of seconds.
    started = time.monotonic()
    served.assert_still_serving()
    assert time.monotonic() - started < 10


MALFORMED = {
    "no messages": {"max_tokens": 3},
    "messages not a list": {"messages": "hello"},
    "empty messages": {"messages": []},
    "message without role": {"messages": [{"content": "hi"}]},
    "content an int": {"messages": [{"role": "user", "content": 5}]},
    "part without type": {"messages": [{"role": "user", "content": [{"text": "hi"}]}]},
    "image_url not a string": {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": 3}]}]},
    "video part": {"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "/x"}}]}]},
    "max_tokens a string": {**chat([]), "max_tokens": "12"},
    "max_tokens zero": {**chat([]), "max_tokens": 0},
    "max_tokens negative": {**chat([]), "max_tokens": -5},
    "bad logit_bias": {**chat([]), "logit_bias": {"x": "y"}},
    "bad generation_config": {**chat([]), "generation_config": "{not json"},
    "generation_config with 100 beams": {**chat([]), "generation_config": '{"num_beams": 100}'},
    "logit_bias outside the vocabulary": {**chat([]), "logit_bias": {"99999999": 1.0}},
    "bad temperature": {**chat([]), "temperature": "hot"},
    "unknown field": {**chat([]), "x" * 5000: 1},
    "other model": {**chat([]), "model": "/etc"},
    "template kwarg that is an argument": {**chat([]), "chat_template_kwargs": {"tokenize": False}},
    "template kwarg the template lacks": {**chat([]), "chat_template_kwargs": {"max_pixels": 10**12}},
    "tool call arguments not JSON": {
        "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]
    },
}


def test_finding_4_malformed_requests_are_client_errors(served):
    for name, payload in MALFORMED.items():
        status, text, _ = served.post("/v1/chat/completions", payload)
        _assert_client_error(status, text, name=name)
    for body in (b"[1, 2]", b"not json", b'"a string"'):
        status, text, _ = served.post("/v1/chat/completions", body)
        _assert_client_error(status, text)
    served.assert_still_serving()


def test_finding_5_admin_endpoints_are_not_served_without_an_api_key(served):
    for path, body in (("/load_model", {"model": "/etc"}), ("/reset", {})):
        status, text, _ = served.post(path, body)
        assert status == 404, text
    served.assert_still_serving()  # the model is still loaded


@needs_serving
def test_finding_5_an_api_key_guards_every_endpoint():
    from fastapi.testclient import TestClient

    from vlmprep.serving.app import build_app
    from vlmprep.serving.policy import ServingPolicy

    class Models:
        force_model = None
        is_dead = False

        def shutdown(self):
            self.reset = True

    models = Models()
    client = TestClient(build_app(models, None, ServingPolicy(api_key="s3cret")))
    for method, path in (("get", "/health"), ("post", "/reset"), ("post", "/v1/chat/completions")):
        assert getattr(client, method)(path).status_code == 401
        assert getattr(client, method)(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/health", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.post("/reset", headers={"Authorization": "Bearer s3cret"}).status_code == 200 and models.reset


def test_finding_6_request_ids_are_the_server_s(served):
    images = served.images
    results = {}

    def send(number):
        payload = chat([data_url(images[number % 4])], stream=number % 2 == 1)
        results[number] = served.post("/v1/chat/completions", payload, headers={"X-Request-ID": "same-id"})

    threads = [threading.Thread(target=send, args=(number,)) for number in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=REQUEST_TIMEOUT_S)
    ids = set()
    for number in range(6):
        status, text, headers = results[number]
        assert status == 200, text
        assert _answer(text, stream=number % 2 == 1) == served.expected(images[number % 4])
        ids.add(headers["X-Request-ID"])
    assert len(ids) == 6 and "same-id" not in ids
    served.assert_still_serving()


def _answer(text: str, stream: bool) -> str:
    if not stream:
        return json.loads(text)["choices"][0]["message"]["content"]
    events = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    chunks = [json.loads(event) for event in events if event != "[DONE]"]
    assert not any("error" in chunk for chunk in chunks), text
    return "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"])


def _server_rss_bytes(pid: int) -> int:
    """The resident memory of a server process and all its descendants (the engine and API server processes)."""
    total = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            total += int(line.split()[1]) * 1024
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            total += _server_rss_bytes(int(child))
    return total


def test_finding_7_the_engine_is_sized_from_the_model(served):
    if "--continuous-batching" not in served.process.args:
        pytest.skip("the engine runs with --continuous-batching only")
    from vlmprep.serving.runners import DEFAULT_ENGINE_BATCH_TOKENS, DEFAULT_ENGINE_CACHE_TOKENS, engine_config

    config = engine_config(served.model)
    assert config.num_blocks * config.page_size <= DEFAULT_ENGINE_CACHE_TOKENS + config.page_size
    assert config.max_batch_tokens <= DEFAULT_ENGINE_BATCH_TOKENS
    assert _server_rss_bytes(served.process.pid) < MAX_SERVER_RSS_BYTES


def test_load_good_and_hostile_requests_at_once(served, tmp_path):
    """32 image chats (half streamed) with 16 malformed or hostile requests among them, all at once."""
    images = _images(8, seed=1)
    goods = [(images[number % 8], number % 2 == 1) for number in range(32)]
    hostile = [
        chat(["/etc/passwd"]),
        chat([f"http://localhost:{free_loopback_port()}/x.png"]),
        chat(["data:image/png;base64," + base64.b64encode(huge_png_header()).decode()]),
        chat([data_url(images[0])], chat_template_kwargs={"chat_template": "{{ 1 }}"}),
        *MALFORMED.values(),
    ][:16]
    assert len(hostile) == 16
    expected = {id(image): served.expected(image) for image in images}
    assert len(set(expected.values())) > 1  # the answers depend on the image: the model can fail
    results, health = {}, []
    stop = threading.Event()

    def poll_health():
        while not stop.is_set():
            health.append(served.health_seconds())
            time.sleep(0.2)

    def send(key, payload):
        results[key] = served.post("/v1/chat/completions", payload)

    jobs = [(("good", n), chat([data_url(image)], stream=stream)) for n, (image, stream) in enumerate(goods)]
    jobs += [(("bad", n), payload) for n, payload in enumerate(hostile)]
    jobs.sort(key=lambda job: (job[0][1] * 3 + (job[0][0] == "bad")) % 48)  # interleaved
    poller = threading.Thread(target=poll_health)
    poller.start()
    threads = [threading.Thread(target=send, args=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=REQUEST_TIMEOUT_S)
    stop.set()
    poller.join()
    assert len(results) == 48
    for n, (image, stream) in enumerate(goods):
        status, text, _ = results[("good", n)]
        assert status == 200, text[:300]
        assert _answer(text, stream) == expected[id(image)]
    for n in range(len(hostile)):
        status, text, _ = results[("bad", n)]
        _assert_client_error(status, text)
    assert health and max(health) < HEALTH_LIMIT_S, health
    assert _server_rss_bytes(served.process.pid) < MAX_SERVER_RSS_BYTES
    served.assert_still_serving()


@needs_serving
@pytest.mark.parametrize(
    ("pinned", "requested", "refused"),
    [
        (None, "org/name", False),
        (None, "org/name@v1", False),
        (None, "/etc", True),
        (None, "../../etc/x", True),
        (None, "tests/cli", True),  # an existing relative directory
        ("/models/a", "/models/a", False),
        ("/models/a", "/models/b", True),
    ],
)
def test_a_request_never_names_a_local_model_path(pinned, requested, refused):
    from fastapi import HTTPException

    from vlmprep.serving.chat import VisionPrepChatCompletionHandler

    class Models:
        force_model = pinned

    handler = VisionPrepChatCompletionHandler(model_manager=Models(), generation_state=None)
    if not refused:
        handler._check_model_name({"model": requested})
        return
    with pytest.raises(HTTPException) as raised:
        handler._check_model_name({"model": requested})
    assert raised.value.status_code == 400


class _HangingHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        time.sleep(6)  # never answers within the server's fetch timeout

    def log_message(self, *args):
        pass


@needs_serving
def test_slow_fetches_and_templates_run_off_the_event_loop(servers, reference):
    """With internal fetches and request templates allowed: a URL that never answers ends at the fetch timeout, a slow
    template renders in a worker thread; `/health` answers within 1 s all the while."""
    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HangingHandler)
    listener.daemon_threads = True
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    slow_template = "{% for i in range(1500) %}{% for j in range(1500) %}{% endfor %}{% endfor %}{{ bos_token }}red"
    try:
        with _serving(servers, "slow work", reference) as served:
            results = {}
            payloads = {
                "hanging fetch": chat([f"http://localhost:{listener.server_address[1]}/never"]),
                "slow template": chat([], chat_template_kwargs={"chat_template": slow_template}),
            }
            threads = [
                threading.Thread(target=lambda k=k, p=p: results.setdefault(k, served.post("/v1/chat/completions", p)))
                for k, p in payloads.items()
            ]
            for thread in threads:
                thread.start()
            health = []
            while any(thread.is_alive() for thread in threads):
                health.append(served.health_seconds())
                time.sleep(0.1)
            assert len(health) > 3 and max(health) < HEALTH_LIMIT_S, health
            _assert_client_error(*results["hanging fetch"][:2], match="took over 2 s")
            assert results["slow template"][0] == 200, results["slow template"]
            served.assert_still_serving()
    finally:
        listener.shutdown()
        listener.server_close()
