"""A server that only receives: the floor of what a chat turn's request costs before any server work.

`bench_serving_chat.py` runs it beside the real servers. It is uvicorn with httptools, as `vlmprep serve` runs; each
`POST` reads the whole body and streams one content chunk at once, without parsing anything. Its time to first token for a turn is what receiving that turn's body (every re-sent photo's bytes) costs
on this machine: a server's time above it is its own work.

Usage: `python utils/bench_receive_only.py PORT`.
"""

from __future__ import annotations

import json
import sys

CHUNK = {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}


async def receive_only(scope, receive, send):
    """ASGI app: `GET /health` answers 200; any other request is read whole and answered with one streamed chunk."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    if scope["method"] == "GET":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": f"data: {json.dumps(CHUNK)}\n\n".encode(), "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def main() -> None:
    import uvicorn

    uvicorn.run(receive_only, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", http="httptools")


if __name__ == "__main__":
    main()
