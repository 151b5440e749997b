"""The argument parser class of the `vlmprep` command and the argument types its subcommands share."""

from __future__ import annotations

import argparse
from typing import NoReturn

from .errors import CLIError


class CommandParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` whose errors are one line (with a pointer to `--help`), exit code 2.

    argparse prints the whole usage before its error line; one line is enough here, and raising `CLIError` lets
    `main` print it like every other failure.
    """

    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{message} (see `{self.prog} --help`)", exit_code=2)


def positive_int(text: str) -> int:
    """An argparse `type`: a positive integer.

    Args:
        text (`str`): the argument as given.

    Returns:
        `int`

    Raises:
        `argparse.ArgumentTypeError`: not an integer, or below 1.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--model`, `--max-new-tokens` and `--device`: the arguments of the commands that load a checkpoint.

    Args:
        parser (`argparse.ArgumentParser`): a subcommand's parser.
    """
    parser.add_argument("--model", required=True, metavar="PATH", help="a local checkpoint directory")
    parser.add_argument("--max-new-tokens", type=positive_int, default=128, metavar="N", help="answer length (128)")
    parser.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
