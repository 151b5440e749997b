"""The families with deepstack features (Granite's, Qwen3-VL's): every deepstack entry upstream keeps reaches its logits (so the
tiny models fail when an entry's rows are wrong). Granite 4 Vision (`(decoder layer, features)` pairs, placeholders
zeroed): generation matches transformers where transformers is right, and beams are exact where it is not (its
expansion reorders a row's images). Granite Docling: the fine connector path (`tile_fine_mask`) is exact, and its
tiles are encoded and cached apart from the same pixels on the coarse path."""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.families.cases_deepstack import build_granite_docling_inputs
from support.generation_checks import assert_beams_exact_where_upstream_reorders_images
from support.references import (
    SYSTEM,
    USER,
    Prompt,
    assert_same_steps,
    generate_logits,
)
from support.traits import deepstack_as_layer_pairs, families_with, has_deepstack
from vlmprep.testing import IMAGE, VisionRunCounter

DEEPSTACK_PAIR_FAMILIES = families_with(deepstack_as_layer_pairs)
DEEPSTACK_FAMILIES = families_with(has_deepstack)
MIN_EFFECT = 1e-3  # an entry changes upstream's logits after the image by more than this


def _zeroed(entry):
    # One deepstack entry with zero rows, in its container: a `(layer, rows)` pair or the rows (per-sample tensors)
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], int):
        return entry[0], _zeroed(entry[1])
    return [rows * 0 for rows in entry]


@pytest.mark.parametrize("family", DEEPSTACK_FAMILIES)
def test_every_kept_deepstack_entry_reaches_the_logits(family):
    """Zeroing the rows of any entry upstream keeps (of pairs, a layer's last) changes upstream's logits (an entry
    added after the last decoder layer changes only the placeholders' own logits)."""
    upstream, _ = model_pair(family)
    prompt = Prompt(upstream.config, [SYSTEM, IMAGE, USER], image_seeds=[2])  # an image of several tiles or crops
    inputs = prompt.inputs()
    pixels = {key: inputs.pop(key) for key in prompt.case.pixel_keys if key in inputs}
    with torch.no_grad():
        encoded = upstream.model.get_image_features(**pixels, return_dict=True)
        reference = upstream(**inputs, mm_encoder_outputs={"image": encoded}, use_cache=False).logits
        entries = list(encoded.deepstack_features)
        if deepstack_as_layer_pairs(family):
            kept = list({layer: index for index, (layer, _) in enumerate(entries)}.values())  # a layer's last pair
            layers = upstream.config.text_config.num_hidden_layers  # the tiny config's pairs reach every layer
        else:
            kept = list(range(len(entries)))  # entry i after decoder layer i
            layers = len(upstream.config.vision_config.deepstack_visual_indexes)
        assert len(kept) == layers, "every decoder layer the config names gets an entry"
        for index in kept:
            encoded.deepstack_features = [*entries[:index], _zeroed(entries[index]), *entries[index + 1 :]]
            changed = upstream(**inputs, mm_encoder_outputs={"image": encoded}, use_cache=False).logits
            assert (changed - reference).abs().max() > MIN_EFFECT, f"deepstack entry {index} is not seen"


@pytest.mark.parametrize("do_sample", [False, True])
@pytest.mark.parametrize("family", DEEPSTACK_PAIR_FAMILIES)
def test_greedy_and_sampling_match_transformers(family, do_sample):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, IMAGE, [30]], image_seeds=[0, 1])
    kwargs = {"max_new_tokens": 3, "do_sample": do_sample, "output_logits": True, "return_dict_in_generate": True}
    torch.manual_seed(1)
    expected = upstream.generate(**prompt.inputs(), **kwargs)
    torch.manual_seed(1)
    with VisionRunCounter(ours) as runs:
        actual = ours.generate(**prompt.inputs(), **kwargs)
    assert torch.equal(actual.sequences, expected.sequences)
    assert_same_steps(actual.logits, expected.logits)
    assert runs.calls == 1 and runs.images == 2


@pytest.mark.parametrize("family", DEEPSTACK_PAIR_FAMILIES)
def test_beams_are_exact_where_upstream_reorders_images(family):
    assert_beams_exact_where_upstream_reorders_images(*model_pair(family), "A, A, B, B")


def test_granite_docling_fine_path_is_exact_and_cached_apart():
    """The same pixels on the coarse, then the fine connector path: each prompt exact, and each encoded."""
    upstream, ours = model_pair("granite_docling")
    segments = [SYSTEM, IMAGE, USER]
    coarse = build_granite_docling_inputs(ours.config, segments, [2])
    fine = build_granite_docling_inputs(ours.config, segments, [2], fine=True)
    assert fine["input_ids"].shape[1] > coarse["input_ids"].shape[1]  # four times the placeholders per tile
    for inputs in (coarse, fine):
        with VisionRunCounter(ours) as runs:
            sequences, logits = generate_logits(ours, inputs, max_new_tokens=2)
        assert runs.calls == 1, "the fine path's tiles are not the coarse path's cached features"
        expected_sequences, expected_logits = generate_logits(upstream, inputs, max_new_tokens=2)
        assert torch.equal(sequences, expected_sequences)
        assert_same_steps(logits, expected_logits)
