"""Indexed-attention families: prefix-store chats, and where upstream differs from the per-row reference.

MiniMax M3's sparse indexer picks key blocks by cache slot, so a left-padded row is not the row alone, upstream as in
the drop-in (the conformance scenarios comparing each padded row with the row alone, the differential one included,
are skipped for it); here the drop-in's padded batches, chunked or not, equal upstream's `generate` on the same padded
batch, step by step, and the differential test's random conversations run on single rows.
"""

from __future__ import annotations

import zlib

import pytest
from hypothesis import example, given, seed, settings
from test_differential import CI_EXAMPLES, COMMON_SETTINGS, run_conversation

from conftest import model_pair
from support.chat import run_chat, turn_image_seeds
from support.differential_strategies import STORE_HIT_CONVERSATION, conversations
from support.references import (
    NO_SPECIAL_TOKENS,
    Prompt,
    assert_close,
    collate,
    generate_logits,
    no_placeholder_answers,
)
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE

SYSTEM = [2, *range(10, 21)]  # 12 tokens: 3 of the tiny indexer's blocks of 4
USER_TURNS = [[SYSTEM, IMAGE, [30, 31]], [[32, 33, 34]], [[35], IMAGE, [36, 37]], [[38, 39]], [[40, 41, 42]]]


def test_minimax_m3_left_padded_batches_equal_upstreams_generate():
    upstream, ours = model_pair("minimax_m3_vl")
    one = Prompt(ours.config, [[2, 10], IMAGE, [11]], image_seeds=[1])
    two = Prompt(ours.config, [[2, 10, 11], IMAGE, [12, 13], IMAGE, [14]], image_seeds=[2, 3])
    batch = collate([one, two], ours.generation_config.pad_token_id)
    expected_sequences, expected = generate_logits(upstream, batch, max_new_tokens=3, **NO_SPECIAL_TOKENS)
    for chunk_size in (None, 1, 4, 9):
        sequences, logits = generate_logits(
            ours, batch, max_new_tokens=3, prefill_chunk_size=chunk_size, **NO_SPECIAL_TOKENS
        )
        assert (sequences == expected_sequences).all(), chunk_size
        for step, expected_step in zip(logits, expected, strict=True):
            assert_close(step, expected_step)


@pytest.mark.parametrize("family", ["minimax_m3_vl", "mistral_large4", "hy_v4_vl"])
def test_chat_restores_the_indexers_keys_per_token(family):
    # MiniMax M3's sparse layer keeps `idx_keys` in a cache layer of its own (not transformers' indexed layer);
    # Mistral Large 4's second layer reads the first's K/V (a cache layer holding nothing) with an indexer of its own.
    # Held per token: every turn exact against one uncached forward of the plain class, only new tokens fed.
    upstream, ours = model_pair(family)
    ours.encoder_cache.clear()
    store = PrefixCache(max_bytes=2**26)
    seeds = turn_image_seeds(USER_TURNS)
    chat = run_chat(upstream, ours, USER_TURNS, seeds, store, 4, **no_placeholder_answers(ours))
    assert len(chat.encoded) == 2, "each image is encoded once"
    assert chat.fed <= 1.02 * chat.minimum, (chat.fed, chat.minimum)
    assert store.stats.hits == len(USER_TURNS) - 1


def test_minimax_m3_differential_on_single_rows():
    # The differential scenario's random conversations (caches, chunks, the prefix store, drafts, continuations),
    # drawn one row at a time: its padded batches are upstream's limitation (above)
    @example(conversation=STORE_HIT_CONVERSATION)
    @seed(zlib.crc32(b"minimax_m3_vl"))
    @settings(max_examples=CI_EXAMPLES, **COMMON_SETTINGS)
    @given(conversation=conversations(max_batch=1))
    def check(conversation) -> None:
        run_conversation("minimax_m3_vl", conversation)

    check()
