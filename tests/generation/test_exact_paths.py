"""Paths a demanding user takes that used to give silent wrong output or a raw crash (issue 11), against upstream."""

from __future__ import annotations

import pytest

import vlmprep
from conftest import model_pair
from helpers import Prompt, assert_close, collate, generate_logits
from vlmprep.testing import IMAGE

SYSTEM = [2, 10, 11, 12, 13, 14, 15, 16]
USER = [20, 21, 22]


@pytest.mark.parametrize("family", ["exaone4_5", "hyperclovax_vision_v2", "llava"])
def test_prefix_store_serves_no_kv_computed_at_another_padding_offset(family):
    # EXAONE 4.5 and HyperCLOVAX number decoder positions by cache place, left padding included: a row stored at one
    # padding offset must not serve a row at another (found by the differential test).
    upstream, ours = model_pair(family)
    pad = ours.generation_config.pad_token_id
    store = vlmprep.PrefixCache()
    first, second, third = (Prompt(ours.config, [ids]) for ids in (list(range(5, 25)), list(range(30, 42)), SYSTEM))
    generate_logits(ours, collate([first, second], pad), max_new_tokens=1, prefix_cache=store)
    batch = collate([third, second], pad)
    _, logits = generate_logits(ours, batch, max_new_tokens=2, prefix_cache=store)
    _, expected = generate_logits(upstream, batch, max_new_tokens=2)
    for step, expected_step in zip(logits, expected, strict=True):
        assert_close(step, expected_step)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"num_beams": 2}, "beam search"),
        ({"use_cache": False}, "use_cache=False"),
        ({"num_return_sequences": 2, "do_sample": True}, "num_return_sequences"),
        ({"cache": "caller"}, "a `cache` is passed"),
    ],
    ids=["beams", "no_cache", "return_sequences", "passed_cache"],
)
def test_a_skipped_prefix_cache_says_why_once(kwargs, reason, capsys):
    import logging as std_logging

    from transformers import DynamicCache

    _, ours = model_pair("llava")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    if kwargs.get("cache") == "caller":
        kwargs = {"cache": DynamicCache(config=ours.config)}
    std_logging.Logger.warning_once.cache_clear()  # once per process: start from a clean slate
    store = vlmprep.PrefixCache()
    for _ in range(2):
        ours.generate(**prompt.inputs(), max_new_tokens=1, prefix_cache=store, **kwargs)
        kwargs.pop("cache", None)
    err = capsys.readouterr().err
    assert err.count("The prefix cache is not used") == 1 and reason in err
