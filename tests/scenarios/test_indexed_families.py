"""Indexed-attention families: prefix-store chats, and where upstream differs from the per-row reference.

MiniMax M3's sparse indexer scores every cached key, pad keys included, and picks key blocks by cache slot, so a
left-padded row is not the row alone, upstream as in the drop-in (the conformance scenarios comparing each padded row
with the row alone are skipped for it), and follows its pad tokens' states. Here: the drop-in's padded batches, chunked
or not, equal upstream's `generate` on the same padded batch, step by step; the calls that could not (a caller's cache
holding pad tokens of another call; chunks under eager attention, where upstream's own chunked prefill differs from its
unchunked one) are refused, and the prefix store never resumes such a batch; single rows long enough for the sparse
selection to drop key blocks are exact chunked, cached and through the prefix store.
"""

from __future__ import annotations

import dataclasses
import zlib

import pytest
import torch
from hypothesis import given, seed, settings
from test_differential import CI_EXAMPLES, COMMON_SETTINGS, run_conversation

from conftest import model_pair
from support.caller_caches import cropped_cache
from support.chat import run_chat, turn_image_seeds
from support.differential_strategies import conversations
from support.references import (
    NO_SPECIAL_TOKENS,
    Prompt,
    assert_close,
    collate,
    eager_attention,
    generate_logits,
    no_placeholder_answers,
)
from support.traits import families_with, has_sparse_indexer
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


@pytest.mark.parametrize("family", families_with(has_sparse_indexer))
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


def minimax_padded_batch(upstream, ours) -> dict:
    # The rows hypothesis found: one image beside three (all seed 0), the first row left-padded by 12 tokens
    one = Prompt(ours.config, [IMAGE], image_seeds=[0])
    three = Prompt(ours.config, [IMAGE, IMAGE, IMAGE], image_seeds=[0, 0, 0])
    return collate([one, three], ours.generation_config.pad_token_id)


def test_minimax_m3_padded_batch_chunked_under_sdpa_equals_upstreams_generate():
    # Under SDPA a pad query attends to nothing: its state, which the indexer reads, is the same in every chunk
    upstream, ours = model_pair("minimax_m3_vl")
    batch = minimax_padded_batch(upstream, ours)
    assert upstream.config.get_text_config()._attn_implementation == "sdpa"
    expected_sequences, expected = generate_logits(upstream, batch, max_new_tokens=2, **NO_SPECIAL_TOKENS)
    for chunk_size in (1, 5):
        sequences, logits = generate_logits(
            ours, batch, max_new_tokens=2, prefill_chunk_size=chunk_size, **NO_SPECIAL_TOKENS
        )
        assert (sequences == expected_sequences).all(), chunk_size
        for step, expected_step in zip(logits, expected, strict=True):
            assert_close(step, expected_step)


def test_minimax_m3_refuses_padded_batch_calls_it_cannot_make_exact():
    upstream, ours = model_pair("minimax_m3_vl")
    batch = minimax_padded_batch(upstream, ours)
    with eager_attention(upstream, ours):
        _, unchunked = generate_logits(upstream, batch, max_new_tokens=1)
        _, chunked = generate_logits(upstream, batch, max_new_tokens=1, prefill_chunk_size=1)
        # Upstream's own: an eager pad query attends uniformly to its forward's keys, so chunks move the padded row
        assert (chunked[0][0] - unchunked[0][0]).abs().max() > 1e-2
        assert_close(chunked[0][1], unchunked[0][1])  # the unpadded row does not move
        _, ours_unchunked = generate_logits(ours, batch, max_new_tokens=1)
        assert_close(ours_unchunked[0], unchunked[0])
        for chunk_size in (1, 4):  # the call hypothesis found (chunks of 1, the prefix store, attentions returned)
            with pytest.raises(ValueError, match="MiniMax M3 VL.*chunked prefill under 'eager' attention"):
                ours.generate(
                    **batch,
                    max_new_tokens=1,
                    prefill_chunk_size=chunk_size,
                    prefix_cache=PrefixCache(block_size=4),
                    output_attentions=True,
                    return_dict_in_generate=True,
                )
        # The prefix store never resumes a padded batch of this family: the call prefills it whole, exactly
        store = PrefixCache(block_size=4)
        for _ in range(2):
            _, stored = generate_logits(ours, batch, max_new_tokens=1, prefix_cache=store)
            assert_close(stored[0], unchunked[0])
        assert store.stats.tokens_reused == 0
    with pytest.raises(ValueError, match="MiniMax M3 VL.*a cache holding its pad tokens.*one row at a time"):
        ours.generate(**batch, max_new_tokens=1, cache=cropped_cache(upstream, batch, 14))


def test_minimax_m3_sparse_selection_exact_on_long_single_rows():
    upstream, ours = model_pair("minimax_m3_vl")
    prompt = Prompt(
        ours.config, [[2, *range(10, 30)], IMAGE, [40, 41], IMAGE, list(range(50, 64))], image_seeds=[1, 2]
    )
    inputs = prompt.inputs()
    with torch.no_grad():
        expected = upstream(**inputs, use_cache=False).logits[:, -1]
    # The tiny indexer keeps 2 blocks of 4 keys: at 49 tokens it drops most of them, and that moves the logits
    indexers = [
        layer.self_attn.indexer
        for layer in upstream.model.language_model.layers
        if layer.self_attn.indexer is not None
    ]
    for indexer in indexers:
        indexer.topk_blocks = 100
    try:
        with torch.no_grad():
            dense = upstream(**inputs, use_cache=False).logits[:, -1]
    finally:
        for indexer in indexers:
            indexer.topk_blocks = upstream.config.get_text_config().index_topk_blocks
    assert (dense - expected).abs().max() > 1e-2
    store = PrefixCache(block_size=4)
    shorter = Prompt(ours.config, [[2, *range(10, 30)], IMAGE, [40, 41]], image_seeds=[1])
    ours.generate(**shorter.inputs(), max_new_tokens=1, prefix_cache=store)
    calls = [
        {"prefill_chunk_size": 3},
        {"prefill_chunk_size": 7},
        {"cache": cropped_cache(upstream, inputs, 21)},
        {"prefix_cache": store},
    ]
    for call in calls:
        _, logits = generate_logits(ours, inputs, max_new_tokens=1, **call)
        assert_close(logits[0], expected)
    assert store.stats.hits == 1


def without_refused_padded_calls(conversation):
    """The conversation with the calls the drop-in refuses for a padded batch left out: no caller's cache, no chunks
    with attentions returned (eager attention)."""

    def allowed(options):
        chunk_size = None if options.output_attentions else options.chunk_size
        return dataclasses.replace(options, cached_fraction=None, reuse_returned_cache=False, chunk_size=chunk_size)

    continuations = tuple((row, allowed(options)) for row, options in conversation.continuations)
    return dataclasses.replace(conversation, first=allowed(conversation.first), continuations=continuations)


def test_minimax_m3_differential_on_padded_batches():
    # The differential scenario draws mostly single rows: here its random conversations on padded batches only
    @seed(zlib.crc32(b"minimax_m3_vl padded"))
    @settings(max_examples=CI_EXAMPLES, **COMMON_SETTINGS)
    @given(conversation=conversations().filter(lambda conversation: len(conversation.rows) > 1))
    def check(conversation) -> None:
        run_conversation("minimax_m3_vl", without_refused_padded_calls(conversation))

    check()
