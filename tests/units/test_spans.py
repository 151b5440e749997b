"""Unit tests of the image-span mechanism: spans, blocks, resume points and the prefill-chunk planner."""

from __future__ import annotations

import random

import pytest
import torch

from vlmprep.generation.prepared import PreparedItems, split_per_item
from vlmprep.generation.spans import (
    Block,
    ItemSpan,
    blocks_from_prefix,
    blocks_from_runs,
    find_placeholder_spans,
    merge_blocks,
    plan_prefill_chunks,
    resolve_resume_point,
)

P = 9  # placeholder id


def test_spans_split_runs_by_token_counts_in_placeholder_order():
    ids = torch.tensor([[1, P, P, 2, P, P, P, P], [P, P, 3, 4, 5, 6, 7, 8]])
    spans = find_placeholder_spans(ids, P, 2)
    assert spans == [
        ItemSpan(0, 1, 3, 0),
        ItemSpan(0, 4, 6, 1),  # two images back to back in one run
        ItemSpan(0, 6, 8, 2),
        ItemSpan(1, 0, 2, 3),
    ]
    assert find_placeholder_spans(ids, P, [2, 4, 2]) == [
        ItemSpan(0, 1, 3, 0),
        ItemSpan(0, 4, 8, 1),
        ItemSpan(1, 0, 2, 2),
    ]
    assert find_placeholder_spans(ids, P, None)[1] == ItemSpan(0, 4, 8, 1)


def test_spans_reject_runs_that_do_not_fit():
    ids = torch.tensor([[1, P, P, P, 2]])
    with pytest.raises(ValueError, match="does not match the images' token counts"):
        find_placeholder_spans(ids, P, 2)
    with pytest.raises(ValueError, match="more image placeholder tokens"):
        find_placeholder_spans(ids, P, [2])


def test_blocks_from_runs_and_prefix():
    types = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 1, 0, 0]])
    assert blocks_from_runs(types == 1) == [Block(0, 1, 3), Block(0, 4, 5), Block(1, 0, 3)]
    assert blocks_from_prefix(types == 0) == [Block(0, 0, 4), Block(1, 3, 5)]


def test_merge_blocks_unions_rows_and_drops_single_tokens():
    blocks = [Block(0, 2, 5), Block(1, 4, 8), Block(0, 10, 11), Block(1, 12, 14)]
    assert merge_blocks(blocks) == [(2, 8), (12, 14)]


def test_resume_point_rolls_back_out_of_blocks_only():
    intervals = [(3, 7), (10, 12)]
    assert [resolve_resume_point(p, intervals) for p in range(13)] == [0, 1, 2, 3, 3, 3, 3, 7, 8, 9, 10, 10, 12]


def test_planner_examples():
    assert plan_prefill_chunks(0, 10, None, [(3, 7)]) == [(0, 10)]
    assert plan_prefill_chunks(0, 10, 4, [(3, 7)]) == [(0, 3), (3, 7), (7, 10)]
    assert plan_prefill_chunks(0, 10, 2, [(3, 7)]) == [(0, 2), (2, 3), (3, 7), (7, 9), (9, 10)]
    assert plan_prefill_chunks(5, 6, 3) == [(5, 6)]
    assert plan_prefill_chunks(4, 4, 3) == []
    with pytest.raises(ValueError, match="positive"):
        plan_prefill_chunks(0, 4, 0)


def test_planner_over_random_layouts():
    """>= 1000 seeded layouts: chunks tile [start, end) in order, never end inside a block, and respect the bound."""
    rng = random.Random(0)
    for _ in range(2000):
        length = rng.randint(1, 80)
        blocks, position = [], 0
        while position < length:
            position += rng.randint(0, 10)
            block_length = rng.randint(1, 16)
            if position + block_length <= length:
                blocks.append(Block(rng.randint(0, 2), position, position + block_length))
            position += block_length
        intervals = merge_blocks(blocks)
        start = resolve_resume_point(rng.randint(0, length - 1), intervals)
        chunk_size = rng.randint(1, 20)
        chunks = plan_prefill_chunks(start, length, chunk_size, intervals)
        assert chunks[0][0] == start and chunks[-1][1] == length
        assert all(a < b for a, b in chunks)
        assert all(chunks[i][1] == chunks[i + 1][0] for i in range(len(chunks) - 1))
        longest = max((b - a for a, b in intervals), default=0)
        for a, b in chunks:
            assert b - a <= max(chunk_size, longest)
            assert not any(s < b < e for s, e in intervals), (chunks, intervals)


def test_prepared_rows_follow_row_major_placeholder_order():
    features = {0: torch.arange(4.0).view(4, 1), 1: torch.arange(10.0, 12.0).view(2, 1)}
    spans = [ItemSpan(0, 2, 6, 0), ItemSpan(1, 1, 3, 1)]
    prepared = PreparedItems(spans=spans, features=features)
    assert prepared.rows_between(0, 8).flatten().tolist() == [0, 1, 2, 3, 10, 11]
    assert prepared.rows_between(4, 8).flatten().tolist() == [2, 3]  # image 0 cut by the cache
    assert prepared.rows_between(6, 8) is None
    expanded = prepared.expand(2)
    assert [span.row for span in expanded.spans] == [0, 1, 2, 3]
    assert expanded.rows_between(0, 8).flatten().tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 10, 11, 10, 11]


def test_split_per_item_handles_every_container():
    stacked = torch.randn(3, 4, 2)
    assert [t.shape for t in split_per_item(stacked, [4, 4, 4])] == [(4, 2)] * 3
    assert [t.shape for t in split_per_item([torch.randn(4, 2), torch.randn(2, 2)], [4, 2])] == [(4, 2), (2, 2)]
    assert [t.shape for t in split_per_item(torch.randn(6, 2), [4, 2])] == [(4, 2), (2, 2)]
