"""Walking a family case's prompt segments: lists of text ids, and item markers (`IMAGE`, `VIDEO`, `AUDIO`) that take
the case's item seeds in order."""

from __future__ import annotations

from collections.abc import Iterator


def with_seeds(segments: list, item_seeds: list[int]) -> Iterator[tuple[list[int] | str, int | None]]:
    """Each segment with its seed: an item's next seed of `item_seeds`, `None` for a list of text ids."""
    seeds = iter(item_seeds)
    for segment in segments:
        yield segment, None if isinstance(segment, list) else next(seeds)
