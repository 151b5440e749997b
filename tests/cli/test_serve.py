"""`vlmprep serve`: transformers' own server, started with the drop-ins registered, answering image chats over loopback.

Each server runs in a subprocess (`python -m vlmprep.serving`, what `vlmprep serve` runs) on a tiny image-sensitive
Gemma3 checkpoint (the module's servers start together: `serve_client.ServerLaunches`); a real HTTP client sends OpenAI chat completions with base64 `image_url` parts. Each answer must be
the plain transformers class's greedy answer to the same chat, and the stats the server writes when it stops
(`VLMPREP_SERVE_STATS`) must show that vlmprep's class served it, the repeated request resumed from the server's prefix
cache (its image not encoded again) and its image not decoded again (the media cache).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from pathlib import Path

import pytest
import transformers
from serve_client import (
    MAX_NEW_TOKENS,
    QUESTION,
    ServerLaunches,
    data_url,
    needs_serving,
    post_chat,
    selected_tests,
    server_env,
    stop_gracefully,
    transformers_answer,
)

import vlmprep.cli
from vlmprep.cli.demo_checkpoint import build_demo_checkpoint, demo_images
from vlmprep.registration import registered, unregister
from vlmprep.serving import (
    SERVE_STATS_ENV,
    add_serve_command,
    serve,
)
from vlmprep.utils._compat import serving_unsupported_message

# From the server's health to its last answer (its start has `serve_client.START_TIMEOUT_S`). Every wait takes what
# is left of it, so the test never runs much longer.
SERVER_DEADLINE_S = 60
# After SIGTERM: the stats are written within about 2 s; tearing down the interpreter (torch, pydantic, FastAPI) takes
# longer under load.
SERVER_EXIT_TIMEOUT_S = 20


@pytest.mark.skipif(
    serving_unsupported_message() is None, reason="the installed transformers' server is the one vlmprep extends"
)
def test_serve_refuses_a_server_it_does_not_extend_naming_what_to_install(capsys):
    # vlmprep serve extends transformers 5.25's server (engine processes); 5.24's is another design
    assert vlmprep.cli.main(["serve", "--port", "1"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("vlmprep: error: ImportError: `vlmprep serve` extends transformers' server")
    assert f"transformers {transformers.__version__}'s server is another design" in error
    assert 'pip install "vlmprep[serving]"' in error


def _transformers_answer(checkpoint: Path, image) -> str:
    """The plain transformers class's greedy answer, decoded as transformers serve decodes it."""
    processor = transformers.AutoProcessor.from_pretrained(checkpoint)
    model = transformers.Gemma3ForConditionalGeneration.from_pretrained(checkpoint).eval()
    return transformers_answer(model, processor, [image])


# Each server test's flags, after the checkpoint, and whether its server writes its stats (`VLMPREP_SERVE_STATS`)
SERVERS = {
    "test_served_image_chat_equals_transformers_and_runs_the_drop_in": ([], True),
    "test_upstream_s_max_model_len_and_request_logging_work": (
        ["--max-model-len", "48", "--enable-log-requests"],
        False,
    ),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return build_demo_checkpoint(tmp_path_factory.mktemp("serve") / "checkpoint")


@pytest.fixture(scope="module")
def servers(request, checkpoint, tmp_path_factory):
    """A server for each server test the session runs (named by the test), started together."""
    launches = ServerLaunches()
    for test in selected_tests(request):
        if test.name in SERVERS:
            flags, writes_stats = SERVERS[test.name]
            work = tmp_path_factory.mktemp("server")
            command = [sys.executable, "-m", "vlmprep.serving", str(checkpoint), "--host", "127.0.0.1"]
            command += ["--device", "cpu", *flags]
            env = server_env(**{SERVE_STATS_ENV: str(work / "stats.json")}) if writes_stats else server_env()
            launches.add(test.name, command, env, work / "server.log")
    yield launches
    launches.close()


@needs_serving
def test_served_image_chat_equals_transformers_and_runs_the_drop_in(request, checkpoint, servers):
    with servers.take(request.node.name) as server:
        # The references are computed while the server starts (it spends that time importing).
        first, second = demo_images()
        expected = {
            "first": _transformers_answer(checkpoint, first),
            "second": _transformers_answer(checkpoint, second),
        }
        # The tiny model must be able to fail: an answer that ignored the image would match only one of these.
        assert expected["first"] != expected["second"]
        server.wait_until_healthy()
        deadline = time.monotonic() + SERVER_DEADLINE_S
        answers = []
        # The repeated image must come from the encoder cache; its request is streamed (transformers' streamer path).
        for image, stream in ((first, False), (first, True), (second, False)):
            payload = {
                "model": str(checkpoint),
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": data_url(image)}},
                            {"type": "text", "text": QUESTION},
                        ],
                    }
                ],
                "temperature": 0,
                "max_tokens": MAX_NEW_TOKENS,
                "stream": stream,
            }
            status, answer = post_chat(f"{server.base_url}/v1/chat/completions", payload, deadline)
            assert status == 200, (answer, server.log.read_text())
            answers.append(answer)
        stop_gracefully(server.process, SERVER_EXIT_TIMEOUT_S)

    assert server.process.returncode == 0, server.log.read_text()
    assert answers == [expected["first"], expected["first"], expected["second"]]
    stats = json.loads(server.stats_path.read_text())
    assert list(stats) == [str(checkpoint)]
    served = stats[str(checkpoint)]
    assert served["class"] == "vlmprep.models.gemma3.Gemma3ForConditionalGeneration" and served["drop_in"]
    # The repeated request resumes from the prefix cache (on by default): its image is inside the reused prefix and
    # needs no encoding at all; each image was encoded, and decoded, once.
    assert served["encoder_cache"]["misses"] == 2 and served["encoder_cache"]["hits"] == 0
    assert served["prefix_cache"]["hits"] >= 1 and served["prefix_cache"]["tokens_reused"] > 0, served
    assert (served["media_cache"]["decodes"], served["media_cache"]["decode_hits"]) == (2, 1), served


def test_serve_arguments_reach_transformers_serve_unparsed():
    parser = argparse.ArgumentParser(prog="vlmprep")
    add_serve_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", "org/model", "--port", "8001", "--help"])
    assert args.serve_args == ["org/model", "--port", "8001", "--help"]
    assert args.func.__name__ == "run_serve_command"


def test_serve_without_the_serving_extra_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "fastapi", None)  # `importlib.util.find_spec` then reports it missing
    with pytest.raises(ImportError, match=r"fastapi.*pip install \"vlmprep\[serving\]\""):
        serve(["--port", "8001"])


@needs_serving
@pytest.mark.parametrize(
    ("argv", "exit_code", "shown"),
    [
        (["--help"], 0, "--api-key"),
        (["--bogus"], 2, "--bogus"),
        (["--max-media-bytes", "0"], 2, "must be positive"),
        (["--allowed-local-media-path", "/no/such/dir"], 2, "no directory"),
    ],
)
def test_serve_help_and_refused_arguments_are_transformers_serve_s(argv, exit_code, shown, capsys):
    registered_before = registered()
    assert serve(argv) == exit_code
    captured = capsys.readouterr()
    assert "vlmprep serve" in captured.out + captured.err and shown in captured.out + captured.err
    assert registered() == registered_before  # nothing started: transformers' auto classes untouched


@needs_serving
def test_serve_that_cannot_listen_exits_non_zero(capsys):
    registered_before = registered()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        exit_code = serve(["--host", "127.0.0.1", "--port", str(taken.getsockname()[1]), "--device", "cpu"])
    assert exit_code not in (0, None)  # uvicorn's own status for a socket it cannot bind (3)
    assert registered() == registered_before  # the API server process loads no model: it registers nothing
    assert "address already in use" in capsys.readouterr().err


def test_transformers_serve_loads_every_drop_in_through_the_registered_auto_class():
    # transformers serve (`ModelManager._load_model`) loads a model type of `MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES`
    # with `AutoModelForMultimodalLM`, any other with the transformers class named in the config, bypassing the auto
    # classes; it sends images only to a model whose class name is a value of that mapping (`get_model_modality`).
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_MULTIMODAL_LM_MAPPING,
        MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES,
    )

    from vlmprep.models.auto import DROP_IN_CLASSES
    from vlmprep.registration import register

    registered_before = registered()
    register()
    try:
        for model_type, drop_in in DROP_IN_CLASSES.items():
            if drop_in.config_class.model_type != model_type:
                continue  # an alias type (`shieldgemma2`): `register` leaves it to transformers' class
            assert model_type in MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES, model_type
            assert drop_in.__name__ == MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES[model_type], model_type
            assert MODEL_FOR_MULTIMODAL_LM_MAPPING[drop_in.config_class] is drop_in, model_type
    finally:
        if not registered_before:
            unregister()


@needs_serving
def test_vlmprep_serve_is_a_subcommand_of_the_cli(capsys):
    from vlmprep.cli import build_parser, main

    args = build_parser().parse_args(["serve", "--port", "8001", "--debug"])
    assert args.serve_args == ["--port", "8001", "--debug"]  # `--debug` reaches `serve`, which drops it
    assert main(["serve", "--help"]) == 0
    assert "--port" in capsys.readouterr().out


@needs_serving
def test_upstream_s_max_model_len_and_request_logging_work(request, servers):
    with servers.take(request.node.name) as server:
        url, log = f"{server.base_url}/v1/chat/completions", server.log
        server.wait_until_healthy()
        deadline = time.monotonic() + SERVER_DEADLINE_S
        short = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}
        long = {**short, "messages": [{"role": "user", "content": "red " * 60}]}
        assert post_chat(url, short, deadline)[0] == 200, log.read_text()
        status, body = post_chat(url, long, deadline)
        assert status == 400 and "--max-model-len" in body and len(body) < 400, body
        stop_gracefully(server.process, SERVER_EXIT_TIMEOUT_S)
    assert server.process.returncode == 0, log.read_text()
    assert "prompt tokens" in log.read_text()  # upstream's line per request (`--enable-log-requests`)
