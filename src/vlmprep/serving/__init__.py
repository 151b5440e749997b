"""`vlmprep serve`: transformers' own OpenAI-compatible server (`transformers serve`), running vlmprep's drop-ins.

- `command`: the `vlmprep serve` command (`serve`, `add_serve_command`) and the stats it reports when it stops;
- `server`: `VisionPrepServe`, transformers' `Serve` with vlmprep's handlers and app;
- `loader`, `runners`: what runs in a model's engine process (the drop-in, its caches, image chats in continuous
  batching);
- `chat`: the chat-completions handler;
- `errors`: the HTTP errors a client gets.

Only `command` is imported here: the others need transformers' serving dependencies (`pip install "vlmprep[serving]"`),
which `serve` checks before importing them.
"""

from .command import (
    SERVE_STATS_ENV,
    SERVING_INSTALL_COMMAND,
    add_serve_command,
    missing_serving_packages,
    run_serve_command,
    serve,
)

__all__ = [
    "SERVE_STATS_ENV",
    "SERVING_INSTALL_COMMAND",
    "add_serve_command",
    "missing_serving_packages",
    "run_serve_command",
    "serve",
]
