"""`vlmprep generate` and `chat` stream their answers, report loading, check `--device` first, and keep images."""

from __future__ import annotations

import argparse
import io
import re
import sys

import pytest
import torch

from vlmprep.cli import conversation, loading, main
from vlmprep.cli.chat import run_chat
from vlmprep.cli.conversation import answer, user_message
from vlmprep.cli.demo_checkpoint import demo_images, ensure_demo_checkpoint
from vlmprep.cli.errors import CLIError
from vlmprep.cli.loading import load_image, load_model_and_processor, quiet_transformers, resolve_device


class RecordingStream(io.StringIO):
    """A text stream that remembers each non-empty write (to see that an answer arrives piece by piece)."""

    def __init__(self, tty: bool = False):
        super().__init__()
        self.writes: list[str] = []
        self.tty = tty

    def write(self, text: str) -> int:
        if text:
            self.writes.append(text)
        return super().write(text)

    def isatty(self) -> bool:
        return self.tty


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    directory, _ = ensure_demo_checkpoint(tmp_path_factory.mktemp("vlmprep-cache") / "demo-gemma3")
    return str(directory)


@pytest.fixture(scope="module")
def loaded(checkpoint):
    return load_model_and_processor(checkpoint, "cpu")


@pytest.fixture
def png(tmp_path) -> str:
    path = tmp_path / "picture.png"
    demo_images()[0].save(path)
    return str(path)


PROMPT = "Describe this picture."
NEW_TOKENS = 8


def reference_answer(loaded, png: str) -> str:
    """The answer without streaming: what `generate` must print."""
    model, processor = loaded
    text, _ = answer(model, processor, [user_message(PROMPT, [load_image(png)])], NEW_TOKENS)
    return text


# -- streaming --------------------------------------------------------------------------------------------------------


def test_answer_streams_the_text_it_returns(loaded, png):
    model, processor = loaded
    stream = RecordingStream()
    text, _ = answer(model, processor, [user_message(PROMPT, [load_image(png)])], NEW_TOKENS, stream=stream)
    assert stream.getvalue() == text + "\n"
    assert len(text.split()) > 1 and len(stream.writes) > 2  # several pieces, then the newline
    assert text == reference_answer(loaded, png)


def test_generate_streams_the_answer_to_stdout(checkpoint, loaded, png, monkeypatch):
    expected = reference_answer(loaded, png)
    out, err = RecordingStream(), RecordingStream()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    argv = ["generate", "--model", checkpoint, "--image", png, "--prompt", PROMPT, "--device", "cpu"]
    code = main([*argv, "--max-new-tokens", str(NEW_TOKENS)])
    assert (code, err.getvalue()) == (0, "")  # not a terminal: no loading report
    assert out.getvalue() == expected + "\n"
    assert len(out.writes) > 2


def test_chat_streams_each_answer(checkpoint, png, monkeypatch):
    stdin = io.StringIO(f"/image {png}\n{PROMPT}\nWhat colors do you see?\n")
    stdout = RecordingStream()
    monkeypatch.setattr(sys, "stderr", RecordingStream())
    args = argparse.Namespace(model=checkpoint, max_new_tokens=NEW_TOKENS, device="cpu")
    assert run_chat(args, stdin=stdin, stdout=stdout) == 0
    lines = stdout.getvalue().splitlines()
    stats = [index for index, line in enumerate(lines) if line.startswith("[images encoded: ")]
    assert len(stats) == 2
    for index in stats:
        streamed = lines[index - 1]
        assert streamed and sum(1 for piece in stdout.writes if piece in streamed) > 1


# -- loading progress -------------------------------------------------------------------------------------------------


def test_loading_is_reported_on_a_terminal(checkpoint, png, monkeypatch):
    out, err = RecordingStream(), RecordingStream(tty=True)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    argv = ["generate", "--model", checkpoint, "--image", png, "--prompt", PROMPT, "--max-new-tokens", "2"]
    assert main([*argv, "--device", "cpu"]) == 0
    report = err.getvalue()
    assert f"vlmprep: loading {checkpoint} (gemma3) on cpu ..." in report
    assert "Loading weights" in report  # transformers' own progress bar
    assert re.search(r"vlmprep: loaded in \d+\.\d s", report)
    assert len(out.getvalue().splitlines()) == 1  # stdout holds the answer only


# -- --device is checked before loading -------------------------------------------------------------------------------


@pytest.fixture
def never_load(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the model must not be loaded when --device is wrong")

    monkeypatch.setattr(loading, "load_model_and_processor", fail)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on machines with and without a GPU


@pytest.mark.parametrize(
    "device, expected",
    [
        ("foo", "unknown device 'foo'; pass --device cpu"),
        ("cuda", "device 'cuda' is not available"),
        ("cuda:1", "device 'cuda:1' is not available"),
        ("meta", "--device meta holds no weights"),
    ],
)
@pytest.mark.parametrize("command", ["generate", "chat"])
def test_bad_device_fails_before_loading(command, device, expected, never_load, png, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("never read\n"))
    argv = [command, "--model", str(tmp_path), "--device", device]
    if command == "generate":
        argv += ["--image", png, "--prompt", "hi"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("vlmprep: error: ") and expected in err
    assert "--device cpu" in err or "cuda" not in device  # the fix is named


def test_device_index_beyond_the_visible_devices(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(CLIError, match=r"2 cuda device\(s\) visible; pass --device cuda:0 to cuda:1"):
        resolve_device("cuda:2")


def test_default_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(None) == "cpu" and resolve_device("cpu") == "cpu"


# -- a failed chat turn keeps the images attached to it ---------------------------------------------------------------


def chat(checkpoint: str, script: str, monkeypatch) -> tuple[str, str]:
    stdout, stderr = RecordingStream(), RecordingStream()
    monkeypatch.setattr(sys, "stderr", stderr)
    args = argparse.Namespace(model=checkpoint, max_new_tokens=NEW_TOKENS, device="cpu")
    with quiet_transformers():  # as `main` runs it
        assert run_chat(args, stdin=io.StringIO(script), stdout=stdout) == 0
    return stdout.getvalue(), stderr.getvalue()


class BreakingStream:
    """Passes writes on to `stream`, but fails the second piece once: generation breaking part-way through."""

    def __init__(self, stream):
        self.stream = stream
        self.pieces = 0

    def write(self, text: str) -> int:
        self.pieces += bool(text)
        if self.pieces == 2:
            raise RuntimeError("out of memory")
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def test_failed_generate_keeps_the_images(checkpoint, png, monkeypatch):
    calls = []

    def answer_failing_once(model, processor, messages, max_new_tokens, stream=None):
        calls.append(messages)
        stream = BreakingStream(stream) if len(calls) == 1 else stream
        return answer(model, processor, messages, max_new_tokens, stream=stream)

    monkeypatch.setattr(conversation, "answer", answer_failing_once)
    out, err = chat(checkpoint, f"/image {png}\n{PROMPT}\n{PROMPT}\nAnd now?\n", monkeypatch)
    assert err.splitlines() == [
        "vlmprep: error: RuntimeError: out of memory (run with --debug for the traceback) (message dropped; "
        "1 image still attached to your next message, /reset drops it)"
    ]
    broken, retried_answer = out.splitlines()[2:4]  # after the banner and the attachment line
    assert broken and retried_answer.startswith(broken) and retried_answer != broken  # the broken line was ended
    # Two answered turns; the image was encoded by the failed attempt already, so the encoder cache serves the retry.
    assert re.findall(r"\[images encoded: (\d+)", out) == ["0", "0"]
    retried = calls[1][-1]["content"]
    assert [item["type"] for item in retried] == ["image", "text"]
    assert len(calls[2]) == 3  # the failed message is not part of the conversation


def test_bad_prompt_and_unreadable_image_keep_the_attached_images(checkpoint, png, tmp_path, monkeypatch):
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("not an image")
    script = f"/image {png}\n/image {not_an_image}\n/image {png}\ncompare <image> with <image> and <image>\n"
    script += "compare <image> with <image>\n"
    out, err = chat(checkpoint, script, monkeypatch)
    first, second = err.splitlines()
    assert first.startswith(f"vlmprep: error: cannot read image {not_an_image}")
    assert first.endswith("; 1 image still attached to your next message, /reset drops it")
    assert "3 <image> marker(s) but 2 image(s)" in second
    assert second.endswith("(message dropped; 2 images still attached to your next message, /reset drops them)")
    # Both kept images went with the retry (with one, its two markers would be refused: a third error line); they are
    # the same picture, encoded once in that call
    assert re.findall(r"\[images encoded: (\d+)", out) == ["1"]


def test_reset_drops_the_kept_images(checkpoint, png, monkeypatch):
    out, err = chat(checkpoint, f"/image {png}\n<image> <image>\n/reset\nhello\n", monkeypatch)
    assert "1 image still attached" in err
    assert re.findall(r"\[images encoded: (\d+)", out) == ["0"]  # "hello" went without the image
