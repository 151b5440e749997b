"""`vlmprep generate`: answer one prompt about one or more images with a local checkpoint."""

from __future__ import annotations

import argparse
import sys

from . import conversation, loading
from .conversation import IMAGE_MARKER
from .parsing import add_model_arguments


def add_generate_command(subparsers) -> None:
    """Add the `generate` subcommand.

    Args:
        subparsers (`argparse._SubParsersAction`): the `vlmprep` parser's subcommands.
    """
    parser = subparsers.add_parser(
        "generate",
        help="answer one prompt about one or more images with a local checkpoint",
        description=f"Answer one prompt about images. Put {IMAGE_MARKER} in the prompt where each image goes "
        "(as many markers as --image files); without markers the images come before the prompt.",
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--image", action="append", default=[], metavar="FILE", help="an image file (repeat for several)"
    )
    parser.add_argument("--prompt", required=True, help="the question or instruction")
    parser.set_defaults(run=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    """`vlmprep generate`: answer one prompt about the given images, printing the answer as its tokens come.

    Args:
        args (`argparse.Namespace`): `model`, `image`, `prompt`, `max_new_tokens`, `device`.

    Returns:
        `int`: 0.
    """
    device = loading.resolve_device(args.device)  # everything the user passed is checked before the (slow) load
    images = [loading.load_image(path) for path in args.image]
    message = conversation.user_message(args.prompt, images)
    model, processor = loading.load_model_and_processor(args.model, device, progress=loading.loading_progress())
    conversation.answer(model, processor, [message], args.max_new_tokens, stream=sys.stdout)
    return 0
