"""Ovis2.5 and LLaVA-OneVision-1.5 (transformers 5.25): an Ovis2.5 item's start-to-end tokens are fed whole in one
forward, also after a prefix-store hit; under an older transformers both drop-ins refuse to load, naming the release."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
import transformers

import vlmprep
from support.registry import FAMILY_CASES
from vlmprep.generation.spans import Block, ItemSpan
from vlmprep.testing import IMAGE, VIDEO

NEEDS_5_25 = pytest.mark.skipif(
    not hasattr(transformers, "Ovis2_5ForConditionalGeneration"), reason="Ovis2.5 needs transformers>=5.25"
)
TEXT = [2, 10, 11, 12, 13, 14, 15, 16]


@NEEDS_5_25
def test_whole_item_blocks_hold_the_start_and_end_tokens():
    from conftest import model_pair

    _, ours = model_pair("ovis2_5")
    spans = [ItemSpan(row=0, start=9, end=13, item_index=0), ItemSpan(row=1, start=1, end=5, item_index=1)]
    assert ours.whole_item_blocks(spans) == [Block(0, 8, 14), Block(1, 0, 6)]


@NEEDS_5_25
@pytest.mark.parametrize("medium", [IMAGE, VIDEO])
def test_stored_prefix_ending_at_the_end_token_is_fed_whole(medium):
    # The prompt ends with the item's end token: a store hit holds every token but the last, whose KV the store saw
    # exact; upstream embeds that end token as the item's only in a forward feeding the item, so prefill resumes at the
    # item's start token (before the fix: the end token fed alone as text, logits off by ~0.5).
    from conftest import model_pair

    upstream, ours = model_pair("ovis2_5")
    inputs = FAMILY_CASES["ovis2_5"].build_inputs(ours.config, [TEXT, medium], [0])
    store = vlmprep.PrefixCache(block_size=4)
    with torch.no_grad():
        expected = upstream(**inputs, use_cache=False).logits[0, -1]
        ours.generate(**inputs, max_new_tokens=2, do_sample=False, prefix_cache=store)
        output = ours.generate(
            **inputs,
            max_new_tokens=1,
            do_sample=False,
            prefix_cache=store,
            output_logits=True,
            return_dict_in_generate=True,
        )
    assert store.stats.hits == 1
    torch.testing.assert_close(output.logits[0][0], expected, atol=1e-5, rtol=0)


@NEEDS_5_25
@pytest.mark.parametrize("chunk_size", [1, 2, 5, 9])
def test_chunks_never_split_an_item_from_its_start_and_end_tokens(chunk_size):
    from conftest import model_pair

    upstream, ours = model_pair("ovis2_5")
    inputs = FAMILY_CASES["ovis2_5"].build_inputs(ours.config, [TEXT, IMAGE, [30], VIDEO, [31]], [0, 1])
    with torch.no_grad():
        expected = upstream(**inputs, use_cache=False).logits[0, -1]
        output = ours.generate(
            **inputs,
            max_new_tokens=1,
            do_sample=False,
            prefill_chunk_size=chunk_size,
            output_logits=True,
            return_dict_in_generate=True,
        )
    torch.testing.assert_close(output.logits[0][0], expected, atol=1e-5, rtol=0)


@pytest.mark.skipif(
    hasattr(transformers, "Ovis2_5ForConditionalGeneration"), reason="checks an older transformers than 5.25"
)
@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("ovis2_5", "Ovis2_5ForConditionalGeneration"),
        ("llava_onevision1_5", "LlavaOnevision15ForConditionalGeneration"),
    ],
)
def test_newer_drop_ins_refuse_to_load_naming_the_release(module, name):
    sys.modules.pop(f"vlmprep.models.{module}", None)
    with pytest.raises(ImportError, match=r"needs transformers>=5\.25 \(installed: "):
        importlib.import_module(f"vlmprep.models.{module}")
    with pytest.raises(ImportError, match=r"transformers>=5\.25"):
        getattr(vlmprep, name)
    assert module not in vlmprep.models.DROP_IN_CLASSES and name in vlmprep.__all__
