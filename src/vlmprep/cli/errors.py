"""How the `vlmprep` command fails: one line on stderr, `vlmprep: error: ...`, and a non-zero exit code."""

from __future__ import annotations

PROG = "vlmprep"


class CLIError(Exception):
    """A user-facing failure: printed as one line, `vlmprep: error: <message>`, then exit with `exit_code`.

    Args:
        message (`str`): what went wrong and, where it helps, what to do.
        exit_code (`int`, *optional*, defaults to 1): the process exit status.
    """

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def one_line(error: BaseException) -> str:
    """The message of `error` as one line: `CLIError`s, `ValueError`s and `OSError`s as they are, others with their
    type and a pointer to `--debug`.

    Args:
        error (`BaseException`): the failure.

    Returns:
        `str`
    """
    if isinstance(error, CLIError):
        message = str(error)
    elif isinstance(error, KeyError):
        message = f"missing key {error}"  # str(KeyError) is only the key's repr
    elif isinstance(error, (ValueError, OSError)):
        message = str(error) or type(error).__name__
    else:
        message = f"{type(error).__name__}: {error} (run with --debug for the traceback)"
    return " ".join(message.split())
