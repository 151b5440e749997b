"""Image spans, bidirectional blocks, resume points and prefill-chunk planning.

Everything vlmprep does with images follows from these few pure functions over token positions. A position is an
index into the (padded) prompt, shared by every batch row; intervals are half-open `[start, end)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch


@dataclass(frozen=True)
class ItemSpan:
    """One item's run of placeholder tokens in one batch row: an image's, or one piece of a video's (any modality).

    Args:
        row (`int`): batch row of the prompt.
        start (`int`): first placeholder position.
        end (`int`): one past the last placeholder position.
        item_index (`int`):
            the item's index, unique across modalities: images are numbered first, in the order of the pixel inputs
            (placeholder order over rows, then positions), then the items of each other modality.
        modality (`str`, *optional*, defaults to `"image"`): the modality of the item (`"image"`, `"video"`, ...).
        modality_index (`int`, *optional*):
            index of the item in its own modality's inputs; `None` when it equals `item_index` (images).
        feature_start (`int`, *optional*, defaults to 0):
            the item's first feature row this span holds; non-zero for the later pieces of an item whose
            placeholders are split into several runs (e.g. one run per video frame between timestamps).
    """

    row: int
    start: int
    end: int
    item_index: int
    modality: str = "image"
    modality_index: int | None = None
    feature_start: int = 0

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def input_index(self) -> int:
        """Index of the item in its own modality's inputs."""
        return self.item_index if self.modality_index is None else self.modality_index


@dataclass(frozen=True)
class Block:
    """A run of positions whose tokens attend to each other in both directions, in one batch row.

    Its KV is right only if it was computed with the whole block visible, so no prefill chunk and no resume point
    may fall strictly inside it.
    """

    row: int
    start: int
    end: int


def find_runs(mask: torch.Tensor) -> list[tuple[int, int, int]]:
    """Maximal runs of `True` in each row of a 2D boolean mask.

    Args:
        mask (`torch.Tensor` of shape `(batch_size, seq_len)`): boolean mask.

    Returns:
        `list[tuple[int, int, int]]`: `(row, start, end)` for every run, in row-major order.
    """
    runs = []
    padded = torch.nn.functional.pad(mask.to(torch.int8), (1, 1))
    edges = padded[:, 1:] - padded[:, :-1]  # +1 where a run starts, -1 one past where it ends
    for row in range(mask.shape[0]):
        starts = (edges[row] == 1).nonzero().flatten().tolist()
        ends = (edges[row] == -1).nonzero().flatten().tolist()
        runs.extend((row, start, end) for start, end in zip(starts, ends, strict=True))
    return runs


def find_placeholder_spans(
    input_ids: torch.Tensor,
    placeholder_id: int,
    tokens_per_item: Sequence[int | Sequence[int]] | int | None,
    modality: str = "image",
    first_index: int = 0,
) -> list[ItemSpan]:
    """The spans of one modality's items in a prompt: its placeholder runs, split per item.

    A run of placeholders may hold several items back to back; it is split by the items' token counts, taken in
    placeholder order. An item whose placeholders are split into several runs (a video with one run per frame)
    states its count as the sequence of its pieces, and gets one span per piece.

    Args:
        input_ids (`torch.Tensor` of shape `(batch_size, seq_len)`): the prompt.
        placeholder_id (`int`): the modality's placeholder token id.
        tokens_per_item (`Sequence[int | Sequence[int]]` or `int`, *optional*):
            placeholder tokens of each item (or of each piece of it), or one count for every item; `None` makes
            every run one item.
        modality (`str`, *optional*, defaults to `"image"`): the modality of the items, stored on the spans.
        first_index (`int`, *optional*, defaults to 0): `item_index` of the first item (items of other modalities
            numbered before these).

    Returns:
        `list[ItemSpan]` in placeholder order.

    Raises:
        `ValueError`: when a run's length does not fit the items' token counts.
    """
    pieces = None  # (item, first feature row, tokens) of every piece, in placeholder order
    if tokens_per_item is not None and not isinstance(tokens_per_item, int):
        pieces = []
        for item, count in enumerate(tokens_per_item):
            feature_start = 0
            for length in [count] if isinstance(count, int) else count:
                pieces.append((item, feature_start, int(length)))
                feature_start += int(length)
    spans: list[ItemSpan] = []
    for row, start, end in find_runs(input_ids == placeholder_id):
        position = start
        while position < end:
            item, feature_start = len(spans), 0
            if tokens_per_item is None:
                length = end - position
            elif isinstance(tokens_per_item, int):
                length = tokens_per_item
            elif len(spans) < len(pieces):
                item, feature_start, length = pieces[len(spans)]
            else:
                raise ValueError(
                    f"The prompt has more {modality} placeholder tokens than the {len(tokens_per_item)} "
                    f"{modality}s passed need (row {row}, positions {position}..{end - 1} have no {modality}). Pass "
                    f"one {modality} per placeholder run, or remove the extra placeholders."
                )
            if position + length > end:
                raise ValueError(
                    f"{modality.capitalize()} placeholder run of length {end - start} at row {row}, positions "
                    f"{start}..{end - 1} does not match the {modality}s' token counts ({modality} {item} needs "
                    f"{length} tokens, {end - position} left). Build the prompt with the model's processor, which "
                    f"inserts exactly the number of placeholders each {modality} needs."
                )
            spans.append(
                ItemSpan(
                    row=row,
                    start=position,
                    end=position + length,
                    item_index=first_index + item,
                    modality=modality,
                    modality_index=None if modality == "image" and first_index == 0 else item,
                    feature_start=feature_start,
                )
            )
            position += length
    return spans


def blocks_from_runs(mask: torch.Tensor) -> list[Block]:
    """Bidirectional blocks that are the maximal runs of `mask` (e.g. Gemma3: `token_type_ids == 1`).

    Args:
        mask (`torch.Tensor` of shape `(batch_size, seq_len)`): positions inside some block.

    Returns:
        `list[Block]`
    """
    return [Block(row, start, end) for row, start, end in find_runs(mask)]


def blocks_from_prefix(mask: torch.Tensor) -> list[Block]:
    """One bidirectional block per row covering every position of `mask` (e.g. PaliGemma: `token_type_ids == 0`).

    Args:
        mask (`torch.Tensor` of shape `(batch_size, seq_len)`): positions of the bidirectional prefix.

    Returns:
        `list[Block]`
    """
    blocks = []
    for row in range(mask.shape[0]):
        positions = mask[row].nonzero().flatten()
        if positions.numel():
            blocks.append(Block(row, int(positions[0]), int(positions[-1]) + 1))
    return blocks


def merge_blocks(blocks: Sequence[Block]) -> list[tuple[int, int]]:
    """Union of the blocks of all rows as disjoint intervals.

    Every row shares the chunk and resume positions, so a cut must avoid the inside of every row's blocks;
    overlapping blocks of different rows therefore act as one.

    Args:
        blocks (`Sequence[Block]`): blocks of any rows.

    Returns:
        `list[tuple[int, int]]`: sorted, disjoint, non-touching `(start, end)` intervals.
    """
    merged: list[list[int]] = []
    for block in sorted(blocks, key=lambda b: (b.start, b.end)):
        if block.end - block.start <= 1:
            continue  # a single token can never be cut
        if merged and block.start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], block.end)
        else:
            merged.append([block.start, block.end])
    return [(start, end) for start, end in merged]


def resolve_resume_point(past_length: int, intervals: Sequence[tuple[int, int]]) -> int:
    """Where prefill may resume, given a cache of `past_length` tokens.

    A cache that ends strictly inside a bidirectional block holds KV computed without the rest of the block (or
    with only part of it visible), so it is rolled back to the block start and the block is recomputed whole. In a
    causal family there are no blocks and any resume point is exact.

    Args:
        past_length (`int`): tokens already in the cache.
        intervals (`Sequence[tuple[int, int]]`): merged bidirectional blocks (see `merge_blocks`).

    Returns:
        `int`: the resume point, `<= past_length`.
    """
    for start, end in intervals:
        if start < past_length < end:
            return start
    return past_length


def plan_prefill_chunks(
    start: int, end: int, chunk_size: int | None, intervals: Sequence[tuple[int, int]] = ()
) -> list[tuple[int, int]]:
    """Split the positions `[start, end)` into prefill chunks that never end strictly inside a bidirectional block.

    The rule: a chunk is cut every `chunk_size` tokens, except that a cut falling strictly inside a block moves back
    to the block start, so the block begins the next chunk; a chunk that begins a block and cannot hold it whole
    grows to the block end. Every chunk therefore holds at most `max(chunk_size, longest block)` tokens, and a block
    is always computed within a single forward.

    Args:
        start (`int`): first position to prefill (the resume point; never inside a block).
        end (`int`): one past the last position.
        chunk_size (`int`, *optional*): target tokens per chunk; `None` plans a single chunk.
        intervals (`Sequence[tuple[int, int]]`, *optional*): merged bidirectional blocks (see `merge_blocks`).

    Returns:
        `list[tuple[int, int]]`: consecutive `(chunk_start, chunk_end)` covering `[start, end)` exactly once.

    Example:

    ```python
    >>> plan_prefill_chunks(0, 10, 4, intervals=[(3, 7)])
    [(0, 3), (3, 7), (7, 10)]

    ```
    """
    if start >= end:
        return []
    if chunk_size is None:
        return [(start, end)]
    if chunk_size < 1:
        raise ValueError(f"`prefill_chunk_size` must be a positive integer, got {chunk_size}.")
    chunks = []
    position = start
    while position < end:
        cut = min(position + chunk_size, end)
        for block_start, block_end in intervals:
            if block_start < cut < block_end:
                cut = block_start if block_start > position else block_end
                break
        chunks.append((position, cut))
        position = cut
    return chunks


def shift_spans(spans: Sequence[ItemSpan], offset: int) -> list[ItemSpan]:
    """Spans moved by `offset` positions (input ids that start after cached tokens they do not repeat)."""
    return [replace(span, start=span.start + offset, end=span.end + offset) for span in spans]


def spans_after(spans: Sequence[ItemSpan], position: int) -> list[ItemSpan]:
    """The spans that end after `position`: the images a prefill from `position` needs features for."""
    return [span for span in spans if span.end > position]
