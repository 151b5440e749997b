"""The `vlmprep` command: the offline demo, `generate`, `chat`, `bench`, and one-line errors without tracebacks."""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import re
import subprocess
import sys
import types

import pytest
from PIL import Image

import vlmprep
import vlmprep.cli
from support.references import gemma3_image_effect
from vlmprep.cli import main
from vlmprep.cli.bench import format_summary
from vlmprep.cli.demo_chat import DEMO_TURNS
from vlmprep.cli.demo_checkpoint import demo_cache_dir, demo_images, ensure_demo_checkpoint


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """`vlmprep demo` run once in-process with `$VLMPREP_CACHE` in a temporary directory: (exit code, stdout)."""
    cache = tmp_path_factory.mktemp("vlmprep-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLMPREP_CACHE", str(cache))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["demo", "--max-new-tokens", "4"])
    assert err.getvalue() == "", err.getvalue()
    return code, out.getvalue(), cache / "demo-gemma3"


@pytest.fixture
def checkpoint(demo_run, monkeypatch):
    monkeypatch.setenv("VLMPREP_CACHE", str(demo_run[2].parent))
    return str(demo_run[2])


@pytest.fixture
def png(tmp_path):
    path = tmp_path / "picture.png"
    demo_images()[0].save(path)
    return str(path)


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def table_rows(output: str) -> list[list[str]]:
    """The per-turn rows of the demo table: turn, images, tokens, then (vlmprep, transformers) per metric."""
    return [line.split() for line in output.splitlines() if re.match(r"^\d+\s+\d+\s+\d+\s", line)]


# -- demo -------------------------------------------------------------------------------------------------------------


def test_demo_builds_the_checkpoint_and_prints_the_table(demo_run):
    code, output, directory = demo_run
    assert code == 0
    assert "built now" in output
    assert "random" in output and "gibberish" in output
    for name in ("config.json", "model.safetensors", "tokenizer.json", "processor_config.json", "chat_template.jinja"):
        assert (directory / name).is_file(), name
    assert output.count("same answer from vlmprep and transformers: yes") == len(DEMO_TURNS)


def test_demo_counts_each_image_once_for_vlmprep_and_every_turn_for_transformers(demo_run):
    rows = table_rows(demo_run[1])
    assert len(rows) == len(DEMO_TURNS)
    images_in_prompt = 0
    for row, (_, new_images) in zip(rows, DEMO_TURNS, strict=True):
        images_in_prompt += len(new_images)
        turn, images, tokens, ours_images, theirs_images, ours_tokens, theirs_tokens = map(int, row[:7])
        assert images == images_in_prompt
        assert ours_images == len(new_images)  # only the turn's new image is encoded
        assert theirs_images == images_in_prompt  # every image of the conversation, every turn
        assert theirs_tokens == tokens  # the whole conversation, every turn
        assert ours_tokens == tokens if turn == 1 else ours_tokens < tokens
    total = next(line for line in demo_run[1].splitlines() if line.startswith("all "))
    assert [int(value) for value in total.split()[1:5]] == [
        sum(int(row[3]) for row in rows),
        sum(int(row[4]) for row in rows),
        sum(int(row[5]) for row in rows),
        sum(int(row[6]) for row in rows),
    ]


def test_demo_checkpoint_is_built_once(checkpoint):
    directory, built = ensure_demo_checkpoint()
    assert str(directory) == checkpoint and str(demo_cache_dir()) == checkpoint
    assert not built


def test_demo_checkpoint_ids_match_its_tokenizer(checkpoint):
    from transformers import AutoConfig, AutoProcessor

    config = AutoConfig.from_pretrained(checkpoint)
    tokenizer = AutoProcessor.from_pretrained(checkpoint).tokenizer
    assert config.image_token_id == tokenizer.image_token_id
    assert config.boi_token_id == tokenizer.boi_token_id
    assert config.eoi_token_id == tokenizer.eoi_token_id
    assert config.text_config.vocab_size >= len(tokenizer)


def test_demo_checkpoint_is_image_sensitive(checkpoint):
    import transformers

    model = transformers.Gemma3ForConditionalGeneration.from_pretrained(checkpoint).eval()
    assert gemma3_image_effect(model) > 1e-3


# -- generate and chat ------------------------------------------------------------------------------------------------


def test_generate_prints_an_answer(checkpoint, png, capsys):
    code, out, err = run(
        [
            "generate",
            "--model",
            checkpoint,
            "--image",
            png,
            "--prompt",
            "Describe this picture.",
            "--max-new-tokens",
            "3",
        ],
        capsys,
    )
    assert (code, err) == (0, "")
    assert len(out.splitlines()) == 1


def test_generate_places_images_at_markers(checkpoint, png, capsys):
    argv = ["generate", "--model", checkpoint, "--image", png, "--image", png, "--max-new-tokens", "2"]
    code, _, err = run([*argv, "--prompt", "compare <image> with <image>"], capsys)
    assert (code, err) == (0, "")


def test_chat_reuses_images_and_tokens_across_turns(checkpoint, png, capsys, monkeypatch):
    script = f"/image {png}\nDescribe this picture.\n/bogus\nWhat colors do you see?\n/quit\nnever read\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    code, out, err = run(["chat", "--model", checkpoint, "--max-new-tokens", "3"], capsys)
    assert code == 0
    stats = re.findall(r"\[images encoded: (\d+), tokens reused: (\d+) of (\d+)", out)
    assert len(stats) == 2
    (first_images, first_reused, _), (second_images, second_reused, second_tokens) = [
        [int(value) for value in row] for row in stats
    ]
    assert (first_images, first_reused) == (1, 0)
    assert second_images == 0  # the image is in the conversation again, but not encoded again
    assert 0 < second_reused < second_tokens
    assert err.strip().splitlines() == [err.strip()] and "unknown command /bogus" in err


def test_chat_errors_keep_the_session(checkpoint, tmp_path, capsys, monkeypatch):
    script = f"/image {tmp_path / 'missing.png'}\nwhat is in <image> ?\nhello\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    code, out, err = run(["chat", "--model", checkpoint, "--max-new-tokens", "2"], capsys)
    assert code == 0
    assert out.count("[images encoded: 0, tokens reused: 0 of ") == 1  # "hello" is answered as the first turn
    first, second = err.splitlines()
    assert first.startswith("vlmprep: error: image file not found")
    assert second.startswith("vlmprep: error: the prompt has 1 <image> marker(s) but 0 image(s)")


# -- errors: one line on stderr, non-zero exit, no traceback ----------------------------------------------------------


@pytest.fixture
def error_files(tmp_path, png):
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("not an image")
    unsupported = tmp_path / "bert"
    unsupported.mkdir()
    (unsupported / "config.json").write_text(json.dumps({"model_type": "bert"}))
    return {
        "png": png,
        "not_an_image": str(not_an_image),
        "unsupported": str(unsupported),
        "missing": str(tmp_path / "missing"),
    }


ERROR_CASES = {
    "missing_model_directory": (["generate", "--model", "{missing}", "--prompt", "hi"], "model directory not found"),
    "missing_image": (["generate", "--model", "{ckpt}", "--image", "{missing}", "--prompt", "hi"], "not found"),
    "unreadable_image": (
        ["generate", "--model", "{ckpt}", "--image", "{not_an_image}", "--prompt", "hi"],
        "cannot read",
    ),
    "unsupported_model_type": (["generate", "--model", "{unsupported}", "--prompt", "hi"], "unsupported model type"),
    "too_few_images_for_markers": (
        ["generate", "--model", "{ckpt}", "--image", "{png}", "--prompt", "<image> and <image>"],
        "2 <image> marker(s) but 1 image(s)",
    ),
    "image_token_without_image": (["generate", "--model", "{ckpt}", "--prompt", "<start_of_image> hi"], "image"),
    "chat_without_checkpoint": (["chat", "--model", "{missing}"], "model directory not found"),
    "missing_prompt": (["generate", "--model", "{ckpt}"], "--prompt"),
    "bad_max_new_tokens": (["demo", "--max-new-tokens", "0"], "positive integer"),
    "unknown_command": (["frobnicate"], "invalid choice"),
    "no_command": ([], "required"),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors_are_one_line_without_traceback(case, checkpoint, error_files, capsys):
    argv, expected = ERROR_CASES[case]
    code, out, err = run([arg.format(ckpt=checkpoint, **error_files) for arg in argv], capsys)
    assert code != 0
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("vlmprep: error: ") and expected in err
    assert "Traceback" not in err


def test_debug_shows_the_traceback(error_files, capsys):
    code, _, err = run(["generate", "--model", error_files["missing"], "--prompt", "hi", "--debug"], capsys)
    assert code == 1
    assert "Traceback" in err and err.splitlines()[-1].startswith("vlmprep: error: model directory not found")


# -- bench ------------------------------------------------------------------------------------------------------------


def test_bench_without_its_module_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "vlmprep.bench", None)  # what a missing module looks like to `import`
    code, out, err = run(["bench", "--quick"], capsys)
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("vlmprep: error: ") and "vlmprep.bench" in err


def test_bench_calls_run_bench_and_prints_its_summary(monkeypatch, capsys, tmp_path):
    calls = []

    def run_bench(quick: bool, out_dir: str, progress: bool = True) -> dict:
        calls.append((quick, out_dir, progress))
        return {"rows": [{"workload": "chat", "metric": "images encoded", "vlmprep": 2, "transformers": 8}]}

    fake = types.ModuleType("vlmprep.bench")
    fake.run_bench = run_bench
    monkeypatch.setitem(sys.modules, "vlmprep.bench", fake)
    code, out, _ = run(["bench", "--quick", "--out", str(tmp_path)], capsys)
    assert code == 0 and calls == [(True, str(tmp_path), True)]
    assert "images encoded" in out and "transformers" in out
    assert run(["bench"], capsys)[0] == 0 and calls[-1] == (False, "bench_out", True)


def test_format_summary_falls_back_to_json():
    assert json.loads(format_summary({"a": 1})) == {"a": 1}


# -- a subcommand from another module --------------------------------------------------------------------------------


def add_hello_command(subparsers) -> None:
    """A subcommand defined outside `vlmprep.cli`, as `vlmprep.serving.add_serve_command` will be."""
    parser = subparsers.add_parser("hello", help="say hello")
    parser.add_argument("--name", default="world")
    parser.set_defaults(run=lambda args: print(f"hello {args.name}, debug={args.debug}") or 0)


def test_a_subcommand_from_another_module_is_one_line(monkeypatch, capsys):
    module = types.ModuleType("hello_command")
    module.add_hello_command = add_hello_command
    monkeypatch.setitem(sys.modules, "hello_command", module)
    monkeypatch.setattr(vlmprep.cli, "SUBCOMMANDS", (*vlmprep.cli.SUBCOMMANDS, "hello_command:add_hello_command"))
    assert run(["hello", "--name", "you"], capsys) == (0, "hello you, debug=False\n", "")
    assert run(["hello", "--debug"], capsys) == (0, "hello world, debug=True\n", "")  # `--debug` after it too
    code, out, _ = run(["--help"], capsys)
    assert code == 0 and re.search(r"\n\s+hello\s+say hello", out)
    assert "hello" in out.split("bench")[-1]  # listed after the built-in commands


# -- the installed command --------------------------------------------------------------------------------------------


def test_python_dash_m_runs_the_command():
    command = [sys.executable, "-m", "vlmprep.cli", "bench", "--bogus"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "vlmprep: error: unrecognized arguments: --bogus (see `vlmprep --help`)\n"


def test_console_script_points_to_main():
    scripts = {entry.name: entry.value for entry in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts.get("vlmprep") == "vlmprep.cli:main"


def test_demo_images_are_rgb_and_differ():
    first, second = demo_images()
    assert first.mode == second.mode == "RGB" and first.size == second.size
    assert first.tobytes() != second.tobytes() and isinstance(first, Image.Image)


def test_version_names_the_tested_and_the_installed_transformers(capsys):
    import transformers

    assert main(["--version"]) == 0
    line = capsys.readouterr().out.strip()
    assert line == (
        f"vlmprep {vlmprep.__version__} (tested with transformers "
        f"{', '.join(vlmprep.__transformers_versions__)}; installed: {transformers.__version__})"
    )
    assert importlib.metadata.version("vlmprep") == vlmprep.__version__
