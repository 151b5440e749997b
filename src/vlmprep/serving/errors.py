"""The HTTP errors `vlmprep serve` answers a client with."""

from __future__ import annotations

__all__ = ["bad_request"]


def bad_request(message: str):
    """An HTTP 400 naming what is wrong with the request.

    Args:
        message (`str`): what is wrong.

    Returns:
        `fastapi.HTTPException`
    """
    from fastapi import HTTPException

    return HTTPException(status_code=400, detail=message)
