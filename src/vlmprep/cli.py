"""The `vlmprep` command: `demo`, `generate`, `chat` and `bench`.

Every failure the user can cause (a missing file, an unreadable image, an unsupported model, bad arguments) ends with
one line on stderr, `vlmprep: error: ...`, and a non-zero exit code; `--debug` shows the traceback instead.

Usage:

```bash
vlmprep demo                                   # offline: a tiny random-weight Gemma3, a scripted 4-turn chat
vlmprep generate --model DIR --image cat.png --prompt "What is in this picture?"
vlmprep chat --model DIR                       # /image FILE attaches an image to the next message, /quit exits
vlmprep bench --quick --out bench_out
```
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

PROG = "vlmprep"
IMAGE_MARKER = "<image>"  # where an image goes in a `generate --prompt`; without markers, images come first


class CLIError(Exception):
    """A user-facing failure: printed as one line, `vlmprep: error: <message>`, then exit with `exit_code`.

    Args:
        message (`str`): what went wrong and, where it helps, what to do.
        exit_code (`int`, *optional*, defaults to 1): the process exit status.
    """

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class _ArgumentParser(argparse.ArgumentParser):
    # argparse prints the whole usage before its error line; one line (with a pointer to --help) is enough here.
    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{message} (see `{self.prog} --help`)", exit_code=2)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `vlmprep` command.

    Returns:
        `argparse.ArgumentParser`
    """
    parser = _ArgumentParser(
        prog=PROG,
        description="Drop-in transformers vision-language models whose vision encoder runs once, in input "
        "preparation.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and transformers' own logs")
    # Also accepted after the command; SUPPRESS keeps a subcommand's default from overwriting the top-level value.
    debug = _ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgumentParser)
    commands.required = True

    demo = commands.add_parser(
        "demo",
        parents=[debug],
        help="offline demo: a scripted multi-turn chat on a tiny random-weight Gemma3, vlmprep vs transformers",
        description="Build (once, into $VLMPREP_CACHE or ~/.cache/vlmprep) a tiny random-weight Gemma3 checkpoint "
        "and run a scripted 4-turn chat with two images through vlmprep and transformers, re-sending the whole "
        "conversation each turn, and print the images each encodes and the tokens each prefills.",
    )
    demo.add_argument("--max-new-tokens", type=_positive_int, default=8, metavar="N", help="answer length (8)")
    demo.add_argument("--rebuild", action="store_true", help="rebuild the demo checkpoint even if it is cached")

    generate = commands.add_parser(
        "generate",
        parents=[debug],
        help="answer one prompt about one or more images with a local checkpoint",
        description=f"Answer one prompt about images. Put {IMAGE_MARKER} in the prompt where each image goes "
        "(as many markers as --image files); without markers the images come before the prompt.",
    )
    _add_model_arguments(generate)
    generate.add_argument(
        "--image", action="append", default=[], metavar="FILE", help="an image file (repeat for several)"
    )
    generate.add_argument("--prompt", required=True, help="the question or instruction")

    chat = commands.add_parser(
        "chat",
        parents=[debug],
        help="interactive multi-turn chat with a local checkpoint (prefix and encoder caches on)",
        description="Chat on stdin. `/image FILE` attaches an image to your next message, `/reset` starts a new "
        "conversation, `/quit` (or end of input) exits. Each turn re-sends the whole conversation; the prefix and "
        "encoder caches skip what the model already computed.",
    )
    _add_model_arguments(chat)

    bench = commands.add_parser(
        "bench", parents=[debug], help="run the benchmarks (vlmprep.bench) and print their summary"
    )
    bench.add_argument(
        "--quick", action="store_true", help="a short run (shorter workloads, fewer repeats; same model)"
    )
    bench.add_argument("--out", default="bench_out", metavar="DIR", help="where results are written (bench_out)")
    return parser


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, metavar="PATH", help="a local checkpoint directory")
    parser.add_argument("--max-new-tokens", type=_positive_int, default=128, metavar="N", help="answer length (128)")
    parser.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `vlmprep` command.

    Args:
        argv (`Sequence[str]`, *optional*): the arguments after the program name; defaults to `sys.argv[1:]`.

    Returns:
        `int`: the exit status (0 on success).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # known before parsing, so that even a parsing failure can show its traceback
    try:
        args = build_parser().parse_args(argv)
        with _quiet_transformers(enabled=not debug):
            return _COMMANDS[args.command](args)
    except SystemExit as stop:  # argparse's `--help`
        return stop.code if isinstance(stop.code, int) else 0
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:  # `vlmprep demo | head`: the reader left, nothing is wrong
        _silence_stdout()
        return 0
    except Exception as error:
        if debug:
            traceback.print_exc()
        print(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
        return error.exit_code if isinstance(error, CLIError) else 1


def _silence_stdout() -> None:
    # Python flushes stdout again at exit and would report the broken pipe; point it at /dev/null first.
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _one_line(error: BaseException) -> str:
    if isinstance(error, CLIError):
        message = str(error)
    elif isinstance(error, KeyError):
        message = f"missing key {error}"  # str(KeyError) is only the key's repr
    elif isinstance(error, (ValueError, OSError)):
        message = str(error) or type(error).__name__
    else:
        message = f"{type(error).__name__}: {error} (run with --debug for the traceback)"
    return " ".join(message.split())


@contextlib.contextmanager
def _quiet_transformers(enabled: bool = True) -> Iterator[None]:
    """Silence transformers' progress bars and informational logs (the command prints its own output)."""
    if not enabled:
        yield
        return
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


# -- demo ---------------------------------------------------------------------------------------------------------


def run_demo(args: argparse.Namespace) -> int:
    """`vlmprep demo`: build the demo checkpoint if needed and print the side-by-side chat table.

    Args:
        args (`argparse.Namespace`): `max_new_tokens`, `rebuild`.

    Returns:
        `int`: 0.
    """
    from .demo import DEMO_TURNS, demo_cache_dir, ensure_demo_checkpoint, format_demo_table, run_demo_conversation

    directory = demo_cache_dir()
    if args.rebuild and directory.exists():
        import shutil

        shutil.rmtree(directory)
    started = time.perf_counter()
    checkpoint, built = ensure_demo_checkpoint(directory)
    num_images = len({index for _, indices in DEMO_TURNS for index in indices})
    print(
        f"vlmprep demo: a {len(DEMO_TURNS)}-turn chat with {num_images} images on a tiny Gemma3 checkpoint\n"
        f"checkpoint: {checkpoint} ({'built now' if built else 'cached'}, {time.perf_counter() - started:.1f} s)\n"
        "The weights are random, so the answers are gibberish: the counts are the point.\n"
        "Each turn re-sends the whole conversation, as chat apps do. vlmprep runs with a PrefixCache and its default\n"
        "encoder cache; transformers gets a fresh call with no cache, exactly as a user would make it.\n",
        flush=True,
    )
    printed: list = []

    def print_turn(turn) -> None:
        printed.append(turn)
        images = " ".join(f"[image {index + 1}]" for index in DEMO_TURNS[len(printed) - 1][1])
        same = turn.vlmprep.token_ids == turn.transformers.token_ids
        print(f"turn {len(printed)}  user:  {(images + ' ' + turn.user).strip()}")
        print(f"        model: {turn.vlmprep.answer or '(empty)'}")
        print(f"        same answer from vlmprep and transformers: {'yes' if same else 'no'}", flush=True)

    turns = run_demo_conversation(checkpoint, max_new_tokens=args.max_new_tokens, on_turn=print_turn)
    print()
    print(format_demo_table(turns))
    ours_images = sum(t.vlmprep.images_encoded for t in turns)
    theirs_images = sum(t.transformers.images_encoded for t in turns)
    ours_tokens = sum(t.vlmprep.tokens_prefilled for t in turns)
    theirs_tokens = sum(t.transformers.tokens_prefilled for t in turns)
    saved = 100 * (1 - ours_tokens / theirs_tokens) if theirs_tokens else 0.0
    print(
        f"\nvlmprep encoded each image once ({ours_images} images encoded, transformers {theirs_images}) and "
        f"prefilled {ours_tokens} tokens (transformers {theirs_tokens}, {saved:.0f}% fewer).\n"
        "On a model this small the time is mostly fixed per-call overhead; on real checkpoints the skipped vision\n"
        "encoder runs and prefill tokens are where the time goes."
    )
    return 0


# -- generate and chat --------------------------------------------------------------------------------------------


def resolve_device(device: str | None) -> str:
    """Check a `--device` value before anything is loaded: it must name a device this machine has.

    Args:
        device (`str`, *optional*): a torch device string (`cpu`, `cuda`, `cuda:1`, `mps`, ...); `None` picks `cuda`
            when available, else `cpu`.

    Returns:
        `str`: the device to load the model on.

    Raises:
        `CLIError` (exit code 2): the device is unknown to torch, or not available on this machine.
    """
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise CLIError(
            f"unknown device {device!r}; pass --device cpu, cuda, cuda:N or mps (or leave --device out: cuda when "
            "available, else cpu)",
            exit_code=2,
        ) from None
    if parsed.type == "cpu":
        return device
    if parsed.type == "meta":
        raise CLIError("--device meta holds no weights and cannot generate; pass --device cpu or cuda", exit_code=2)
    # mps has no device_count; the other accelerators (cuda, xpu, npu, ...) have a torch.<type> module with both.
    backend = torch.backends.mps if parsed.type == "mps" else getattr(torch, parsed.type, None)
    is_available = getattr(backend, "is_available", None)
    if not callable(is_available) or not is_available():
        raise CLIError(
            f"device {device!r} is not available: this torch build or machine has no {parsed.type} device; "
            "pass --device cpu (or leave --device out: cuda when available, else cpu)",
            exit_code=2,
        )
    device_count = getattr(backend, "device_count", None)
    count = device_count() if callable(device_count) else 1
    if parsed.index is not None and parsed.index >= count:
        raise CLIError(
            f"device {device!r} is not available: {count} {parsed.type} device(s) visible; pass --device "
            f"{parsed.type}:0{f' to {parsed.type}:{count - 1}' if count > 1 else ''}",
            exit_code=2,
        )
    return device


def load_model_and_processor(path: str, device: str | None = None, progress: IO[str] | None = None) -> tuple[Any, Any]:
    """Load a local checkpoint of a supported family: `AutoProcessor` and `vlmprep.AutoModelForImageTextToText`.

    Args:
        path (`str`): a checkpoint directory.
        device (`str`, *optional*): torch device; defaults to `cuda` when available, else `cpu`.
        progress (`IO[str]`, *optional*): where to report loading (a line before, transformers' weight-loading
            progress bar, a line after); nothing is reported when `None`.

    Returns:
        `tuple[PreTrainedModel, ProcessorMixin]`

    Raises:
        `CLIError`: the device is unknown or unavailable, the directory or its config is missing, or the model type
            has no vlmprep drop-in class.
    """
    from transformers import AutoConfig, AutoProcessor

    from .models.auto import DROP_IN_CLASSES, AutoModelForImageTextToText

    device = resolve_device(device)
    if not Path(path).is_dir():
        raise CLIError(f"model directory not found: {path} (pass a local checkpoint directory)")
    if not (Path(path) / "config.json").is_file():
        raise CLIError(f"no config.json in {path}: not a transformers checkpoint directory")
    config = AutoConfig.from_pretrained(path)
    if config.model_type not in DROP_IN_CLASSES:
        raise CLIError(
            f"unsupported model type {config.model_type!r} in {path}; vlmprep supports: "
            f"{', '.join(sorted(DROP_IN_CLASSES))}"
        )
    started = time.perf_counter()
    if progress is not None:
        print(f"{PROG}: loading {path} ({config.model_type}) on {device} ...", file=progress, flush=True)
    processor = AutoProcessor.from_pretrained(path)
    if getattr(processor, "chat_template", None) is None:
        raise CLIError(f"the processor in {path} has no chat template; vlmprep chat/generate need one")
    with _progress_bars(enabled=progress is not None):
        model = AutoModelForImageTextToText.from_pretrained(path, config=config, dtype="auto").to(device).eval()
    if progress is not None:
        print(f"{PROG}: loaded in {time.perf_counter() - started:.1f} s", file=progress, flush=True)
    return model, processor


def _loading_progress() -> IO[str] | None:
    # Loading reports go to stderr when a person watches it; piped or captured runs keep stderr for errors only.
    return sys.stderr if sys.stderr.isatty() else None


@contextlib.contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    """Turn transformers' progress bars (e.g. "Loading weights") on for the block, whatever `_quiet_transformers` did."""
    from transformers.utils import logging as hf_logging

    if not enabled or hf_logging.is_progress_bar_enabled():
        yield
        return
    hf_logging.enable_progress_bar()
    try:
        yield
    finally:
        hf_logging.disable_progress_bar()


def load_image(path: str):
    """Open an image file as RGB.

    Args:
        path (`str`): the file.

    Returns:
        `PIL.Image.Image`

    Raises:
        `CLIError`: the file is missing or is not a readable image.
    """
    from PIL import Image, UnidentifiedImageError

    if not os.path.isfile(path):
        raise CLIError(f"image file not found: {path}")
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as error:
        reason = "not an image file PIL can read" if isinstance(error, UnidentifiedImageError) else error
        raise CLIError(f"cannot read image {path}: {reason}") from error


def user_message(prompt: str, images: list) -> dict:
    """A chat message with `images` and `prompt`: at the prompt's `<image>` markers, else images first.

    Args:
        prompt (`str`): the text, optionally with one `<image>` marker per image.
        images (`list[PIL.Image.Image]`): the images.

    Returns:
        `dict`: `{"role": "user", "content": [...]}`.

    Raises:
        `CLIError`: the prompt has markers, but not one per image.
    """
    pieces = prompt.split(IMAGE_MARKER)
    markers = len(pieces) - 1
    if markers == 0:
        content = [{"type": "image", "image": image} for image in images]
        content.append({"type": "text", "text": prompt})
        return {"role": "user", "content": content}
    if markers != len(images):
        raise CLIError(
            f"the prompt has {markers} {IMAGE_MARKER} marker(s) but {len(images)} image(s) were given; "
            f"pass one --image per marker, or no markers to put the images first"
        )
    content = []
    for index, piece in enumerate(pieces):
        if piece.strip():
            content.append({"type": "text", "text": piece.strip()})
        if index < len(images):
            content.append({"type": "image", "image": images[index]})
    return {"role": "user", "content": content}


class AnswerStreamer:
    """A `generate` streamer writing the answer to `stream` as tokens come, prompt and special tokens skipped.

    transformers' `TextStreamer` decodes (it knows when a piece of text is final); this class only redirects its output
    from `print` to `stream`. It wraps rather than subclasses, so that importing the CLI does not import transformers.
    Leading whitespace is not written, so the streamed text is the stripped answer; the stream ends with a newline.

    Args:
        tokenizer (`PreTrainedTokenizerBase` or `ProcessorMixin`): decodes the new tokens.
        stream (`IO[str]`): where the text goes (flushed after every piece).
    """

    def __init__(self, tokenizer, stream: IO[str]):
        from transformers import TextStreamer

        self.decoder = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        self.decoder.on_finalized_text = self.on_finalized_text
        self.stream = stream
        self.text = ""  # what was written so far, without the final newline
        self.line_open = False  # some text written and no newline after it yet

    def put(self, value) -> None:
        """Called by `generate` with the prompt, then with each new token."""
        self.decoder.put(value)

    def end(self) -> None:
        """Called by `generate` when the answer is complete."""
        self.decoder.end()

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Write a piece of the answer that will not change any more."""
        if not self.text:
            text = text.lstrip()
        if text:
            self.stream.write(text)
            self.text += text
            self.line_open = True
        if stream_end:
            self.close_line()
        self.stream.flush()

    def close_line(self) -> None:
        """End the streamed line (at the end of the answer, or when generation fails part-way)."""
        self.stream.write("\n")
        self.line_open = False


def answer(
    model, processor, messages: list[dict], max_new_tokens: int, stream: IO[str] | None = None
) -> tuple[str, dict[str, int]]:
    """Generate the model's next turn for a conversation, re-sending all of it (caches skip what was computed).

    Args:
        model (`PreTrainedModel`): a vlmprep drop-in model.
        processor (`ProcessorMixin`): its processor, with a chat template.
        messages (`list[dict]`): the conversation so far, ending with the user's message.
        max_new_tokens (`int`): answer length.
        stream (`IO[str]`, *optional*): where to write the answer as its tokens come (an `AnswerStreamer`, ending
            with a newline); nothing is written when `None`.

    Returns:
        `tuple[str, dict[str, int]]`: the answer, and `images_encoded`, `prompt_tokens`, `tokens_reused`.
    """
    import torch

    inputs = processor.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_tensors="pt", add_generation_prompt=True
    ).to(model.device)
    if inputs.get("pixel_values") is not None and inputs["pixel_values"].is_floating_point():
        inputs["pixel_values"] = inputs["pixel_values"].to(model.dtype)
    encoder_before = model.encoder_cache.stats.misses if model.encoder_cache is not None else 0
    prefix_before = model.prefix_cache.stats.tokens_reused if model.prefix_cache is not None else 0
    prompt_length = inputs["input_ids"].shape[1]
    streamer = AnswerStreamer(getattr(processor, "tokenizer", processor), stream) if stream is not None else None
    try:
        with torch.inference_mode():
            sequences = model.generate(**inputs, max_new_tokens=max_new_tokens, streamer=streamer)
    except BaseException:
        if streamer is not None and streamer.line_open:
            streamer.close_line()  # the error line that follows starts on a line of its own
            stream.flush()
        raise
    text = processor.decode(sequences[0, prompt_length:], skip_special_tokens=True).strip()
    stats = {
        "images_encoded": (model.encoder_cache.stats.misses - encoder_before) if model.encoder_cache else 0,
        "prompt_tokens": int(prompt_length),
        "tokens_reused": (model.prefix_cache.stats.tokens_reused - prefix_before) if model.prefix_cache else 0,
    }
    return text, stats


def run_generate(args: argparse.Namespace) -> int:
    """`vlmprep generate`: answer one prompt about the given images, printing the answer as its tokens come.

    Args:
        args (`argparse.Namespace`): `model`, `image`, `prompt`, `max_new_tokens`, `device`.

    Returns:
        `int`: 0.
    """
    device = resolve_device(args.device)  # everything the user passed is checked before the (slow) model load
    images = [load_image(path) for path in args.image]
    message = user_message(args.prompt, images)
    model, processor = load_model_and_processor(args.model, device, progress=_loading_progress())
    answer(model, processor, [message], args.max_new_tokens, stream=sys.stdout)
    return 0


CHAT_HELP = "commands: /image FILE (attach to your next message), /reset (new conversation), /quit"


def run_chat(args: argparse.Namespace, stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    """`vlmprep chat`: a multi-turn chat on stdin, re-sending the conversation each turn with caches on.

    Args:
        args (`argparse.Namespace`): `model`, `max_new_tokens`, `device`.
        stdin (`IO[str]`, *optional*): defaults to `sys.stdin` (read at call time).
        stdout (`IO[str]`, *optional*): defaults to `sys.stdout`.

    Returns:
        `int`: 0.
    """
    from . import PrefixCache

    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    device = resolve_device(args.device)
    model, processor = load_model_and_processor(args.model, device, progress=_loading_progress())
    model.prefix_cache = PrefixCache()
    interactive = stdin.isatty()
    print(f"vlmprep chat with {args.model} ({model.config.model_type}); {CHAT_HELP}", file=stdout)
    messages: list[dict] = []
    pending_images: list = []
    while True:
        if interactive:
            print("> ", end="", file=stdout, flush=True)
        line = stdin.readline()
        if not line:
            break
        line = line.strip()
        if not line:
            continue
        if line in ("/quit", "/exit"):
            break
        if line == "/reset":
            messages, pending_images = [], []
            print("(new conversation)", file=stdout)
            continue
        if line == "/image" or line.startswith("/image "):
            path = line[len("/image") :].strip()
            try:
                if not path:
                    raise CLIError("usage: /image FILE")
                pending_images.append(load_image(path))
            except CLIError as error:  # the chat goes on, with the images attached before
                print(f"{PROG}: error: {error}{_still_attached(pending_images)}", file=sys.stderr)
                continue
            print(f"(image {path} attached to your next message)", file=stdout)
            continue
        if line.startswith("/"):
            print(f"{PROG}: error: unknown command {line.split()[0]}; {CHAT_HELP}", file=sys.stderr)
            continue

        start = time.perf_counter()
        try:
            message = user_message(line, pending_images)
            text, stats = answer(model, processor, [*messages, message], args.max_new_tokens, stream=stdout)
        except BrokenPipeError:  # the reader of stdout left: there is no one to chat with
            raise
        except Exception as error:  # a bad prompt, a generate error: drop the message, keep the chat and its images
            if getattr(args, "debug", False):
                traceback.print_exc()
            print(
                f"{PROG}: error: {_one_line(error)} (message dropped{_still_attached(pending_images)})",
                file=sys.stderr,
                flush=True,
            )
            continue
        messages.append(message)
        messages.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
        pending_images = []
        print(
            f"[images encoded: {stats['images_encoded']}, tokens reused: {stats['tokens_reused']} of "
            f"{stats['prompt_tokens']}, {time.perf_counter() - start:.2f} s]",
            file=stdout,
            flush=True,
        )
    return 0


def _still_attached(images: list) -> str:
    # Said after a failed turn or attachment, so the user knows a retry needs no new /image.
    if not images:
        return ""
    count = f"{len(images)} image{'s' if len(images) > 1 else ''}"
    return f"; {count} still attached to your next message, /reset drops {'them' if len(images) > 1 else 'it'}"


# -- bench --------------------------------------------------------------------------------------------------------


def run_bench_command(args: argparse.Namespace) -> int:
    """`vlmprep bench`: run `vlmprep.bench.run_bench` and print its summary.

    Args:
        args (`argparse.Namespace`): `quick`, `out`.

    Returns:
        `int`: 0.

    Raises:
        `CLIError` (exit code 2): `vlmprep.bench` is not installed.
    """
    try:
        bench = importlib.import_module("vlmprep.bench")  # lazily: the command works without its dependencies
    except ModuleNotFoundError as error:
        if error.name not in ("vlmprep.bench", "vlmprep"):
            raise  # the bench module exists but one of its own imports is missing: that message is the useful one
        raise CLIError("the benchmarks (vlmprep.bench) are not available in this installation", exit_code=2) from None
    summary = bench.run_bench(quick=args.quick, out_dir=args.out, progress=True)
    formatter = getattr(bench, "format_bench_table", None)
    print(formatter(summary) if callable(formatter) else format_summary(summary))
    return 0


def format_summary(summary: Any) -> str:
    """A benchmark summary as readable text: its `rows` as a table (with runtime and files written), else JSON.

    Args:
        summary (`Any`): what `run_bench` returned.

    Returns:
        `str`
    """
    if isinstance(summary, str):
        return summary
    rows = summary.get("rows") if isinstance(summary, dict) else None
    if not (isinstance(rows, list) and rows and all(isinstance(row, dict) for row in rows)):
        return json.dumps(summary, indent=2, default=str)
    columns = [key for key in rows[0] if key in ("workload", "metric", "vlmprep", "transformers", "ratio")]
    columns = columns or list(rows[0])
    cells = [[_cell(row.get(column)) for column in columns] for row in rows]
    widths = [max(len(column), *(len(line[i]) for line in cells)) for i, column in enumerate(columns)]
    lines = [columns, ["-" * width for width in widths], *cells]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in lines]
    extras = [f"{key}: {summary[key]}" for key in ("runtime_s", "json_path", "png_path") if key in summary]
    return "\n".join(lines + ([""] + extras if extras else []))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


_COMMANDS = {"demo": run_demo, "generate": run_generate, "chat": run_chat, "bench": run_bench_command}

if __name__ == "__main__":
    sys.exit(main())
