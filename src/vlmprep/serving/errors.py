"""The HTTP errors `vlmprep serve` answers a client with (short, never echoing more than a little of the input), and the
logger of its own messages."""

from __future__ import annotations

__all__ = ["MAX_ECHO_CHARS", "SERVER_LOGGER_NAME", "bad_request", "client_error", "server_logger", "shorten"]

# The most characters of a client's input an error message quotes (a 20 MiB data URL must not come back, or be logged).
MAX_ECHO_CHARS = 200


def shorten(text: object, limit: int = MAX_ECHO_CHARS) -> str:
    """`text` as a string of at most `limit` characters (cut in the middle, marked with `...`).

    Args:
        text (`object`): what to quote; not a string: its `str`.
        limit (`int`, *optional*, defaults to `MAX_ECHO_CHARS`): the most characters.

    Returns:
        `str`

    Example:

    ```python
    >>> from vlmprep.serving.errors import shorten
    >>> shorten("x" * 1000, 11)
    'xxxx...xxxx'

    ```
    """
    text = text if isinstance(text, str) else str(text)
    if len(text) <= limit:
        return text
    keep = max(limit - 3, 2)
    return f"{text[: keep // 2]}...{text[len(text) - (keep - keep // 2) :]}"


def client_error(status: int, message: str):
    """An HTTP error for the client, its message cut to a few hundred characters.

    Args:
        status (`int`): a 4xx status.
        message (`str`): what is wrong.

    Returns:
        `fastapi.HTTPException`
    """
    from fastapi import HTTPException

    return HTTPException(status_code=status, detail=shorten(message, 3 * MAX_ECHO_CHARS))


def bad_request(message: str):
    """An HTTP 400 naming what is wrong with the request.

    Args:
        message (`str`): what is wrong.

    Returns:
        `fastapi.HTTPException`
    """
    return client_error(400, message)


# The logger of the server's own messages: under transformers serve's, so that `--log-level` sets what they say, in
# the API server and in the engine process alike (upstream sets the level of `transformers.cli` only).
SERVER_LOGGER_NAME = "transformers.cli.vlmprep"


def server_logger():
    """The logger `vlmprep serve`'s modules write to (see `SERVER_LOGGER_NAME`).

    Returns:
        `logging.Logger`
    """
    from transformers.utils import logging as hf_logging

    return hf_logging.get_logger(SERVER_LOGGER_NAME)
