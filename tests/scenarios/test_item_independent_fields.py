"""Ovis2 gives its image indicator tokens (`<IMG_START>`, ...) vision embeddings in every forward that feeds images,
and text embeddings otherwise: the same tokens have other KV in a call with images than in one without, so the prefix
cache never shares between the two (a stray `<IMG_START>` in a text prompt, then the same prefix before an image)."""

from __future__ import annotations

from conftest import model_pair
from support.families.cases_indicators import IMG_START
from support.references import SYSTEM, USER, Prompt, assert_close, generate_logits, reference_next_logits
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE


def test_indicator_kv_of_a_text_call_is_not_reused_by_an_image_call():
    upstream, ours = model_pair("ovis2")
    store = PrefixCache()
    text_only = Prompt(ours.config, [SYSTEM, [IMG_START, 30, 31]], image_seeds=[])
    generate_logits(ours, text_only.inputs(), max_new_tokens=1, prefix_cache=store)  # stores SYSTEM + <IMG_START>
    with_image = Prompt(ours.config, [SYSTEM, IMAGE, USER], image_seeds=[0])  # its image run starts with <IMG_START>
    _, logits = generate_logits(ours, with_image.inputs(), max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], reference_next_logits(upstream, with_image))
    _, logits = generate_logits(ours, text_only.inputs(), max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], reference_next_logits(upstream, text_only))
