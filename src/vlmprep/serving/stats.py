"""What `vlmprep serve` reports of a served model when it stops: a log line, and `$VLMPREP_SERVE_STATS`.

Importing this module needs nothing of transformers' server: the `vlmprep serve` command names the variable before it
checks the serving packages.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .errors import server_logger

__all__ = ["SERVE_STATS_ENV", "report_served_stats"]

logger = server_logger()

# When set, the file the stopping server writes its models' counters to (one JSON object, by model name).
SERVE_STATS_ENV = "VLMPREP_SERVE_STATS"


def report_served_stats(stats: dict[str, dict[str, Any]]) -> None:
    """Logs each model's counters, and writes them all to `$VLMPREP_SERVE_STATS` when it names a file.

    Args:
        stats (`dict[str, dict]`): model name -> its counters (`vlmprep.serving.server.served_stats`).
    """
    for name, model_stats in stats.items():
        cache = model_stats.get("encoder_cache")
        counters = f"encoder cache {cache['hits']} hits, {cache['misses']} misses" if cache else "no encoder cache"
        prefix, media = model_stats.get("prefix_cache"), model_stats.get("media_cache")
        if prefix:
            counters += (
                f"; prefix cache {prefix['tokens_reused']} tokens reused, {prefix['tokens_prefilled']} prefilled"
            )
        if media:
            counters += f"; media cache {media['decode_hits']} images not decoded again, {media['decodes']} decoded"
        logger.info("vlmprep serve served %s with %s: %s", name, model_stats["class"], counters)
    path = os.environ.get(SERVE_STATS_ENV)
    if path:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(stats, file, indent=2)
