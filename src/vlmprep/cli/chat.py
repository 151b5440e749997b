"""`vlmprep chat`: an interactive multi-turn chat with a local checkpoint, prefix and encoder caches on."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import traceback
from typing import IO

from . import conversation, loading
from .errors import PROG, CLIError, one_line
from .parsing import add_model_arguments


def add_chat_command(subparsers) -> None:
    """Add the `chat` subcommand.

    Args:
        subparsers (`argparse._SubParsersAction`): the `vlmprep` parser's subcommands.
    """
    parser = subparsers.add_parser(
        "chat",
        help="interactive multi-turn chat with a local checkpoint (prefix and encoder caches on)",
        description="Chat on stdin. `/image FILE` attaches an image to your next message, `/reset` starts a new "
        "conversation, `/quit` (or end of input) exits. Each turn re-sends the whole conversation; the prefix and "
        "encoder caches skip what the model already computed.",
    )
    add_model_arguments(parser)
    parser.set_defaults(run=run_chat)


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
    from .. import PrefixCache

    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    device = loading.resolve_device(args.device)
    model, processor = loading.load_model_and_processor(args.model, device, progress=loading.loading_progress())
    # An encoder-decoder's decoder KV is no prefix of the next turn's (the drop-in refuses a prefix cache)
    model.prefix_cache = None if model.config.is_encoder_decoder else PrefixCache()
    interactive = stdin.isatty()
    print(f"vlmprep chat with {args.model} ({model.config.model_type}); {CHAT_HELP}", file=stdout)
    chat = _Conversation()
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
        if line.startswith("/"):
            _run_command(line, chat, stdout)
        else:
            _answer_turn(line, chat, model, processor, args, stdout)
    return 0


@dataclasses.dataclass
class _Conversation:
    """What the chat holds between turns: the messages so far and the images attached to the next one."""

    messages: list[dict] = dataclasses.field(default_factory=list)
    pending_images: list = dataclasses.field(default_factory=list)


def _run_command(line: str, chat: _Conversation, stdout: IO[str]) -> None:
    """`/reset` or `/image FILE`; any other command is an error the chat goes on after."""
    if line == "/reset":
        chat.messages, chat.pending_images = [], []
        print("(new conversation)", file=stdout)
    elif line == "/image" or line.startswith("/image "):
        path = line[len("/image") :].strip()
        try:
            if not path:
                raise CLIError("usage: /image FILE")
            chat.pending_images.append(loading.load_image(path))
        except CLIError as error:  # the chat goes on, with the images attached before
            print(f"{PROG}: error: {error}{_still_attached(chat.pending_images)}", file=sys.stderr)
            return
        print(f"(image {path} attached to your next message)", file=stdout)
    else:
        print(f"{PROG}: error: unknown command {line.split()[0]}; {CHAT_HELP}", file=sys.stderr)


def _answer_turn(line: str, chat: _Conversation, model, processor, args: argparse.Namespace, stdout: IO[str]) -> None:
    """Answer one user message with the whole conversation re-sent, streaming the answer and then its stats."""
    start = time.perf_counter()
    try:
        message = conversation.user_message(line, chat.pending_images)
        text, stats = conversation.answer(
            model, processor, [*chat.messages, message], args.max_new_tokens, stream=stdout
        )
    except BrokenPipeError:  # the reader of stdout left: there is no one to chat with
        raise
    except Exception as error:  # a bad prompt, a generate error: drop the message, keep the chat and its images
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(
            f"{PROG}: error: {one_line(error)} (message dropped{_still_attached(chat.pending_images)})",
            file=sys.stderr,
            flush=True,
        )
        return
    chat.messages.append(message)
    chat.messages.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
    chat.pending_images = []
    print(
        f"[images encoded: {stats['images_encoded']}, tokens reused: {stats['tokens_reused']} of "
        f"{stats['prompt_tokens']}, {time.perf_counter() - start:.2f} s]",
        file=stdout,
        flush=True,
    )


def _still_attached(images: list) -> str:
    # Said after a failed turn or attachment, so the user knows a retry needs no new /image.
    if not images:
        return ""
    count = f"{len(images)} image{'s' if len(images) > 1 else ''}"
    return f"; {count} still attached to your next message, /reset drops {'them' if len(images) > 1 else 'it'}"
