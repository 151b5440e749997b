"""Families whose features are summed in at several decoder layers as `(decoder layer, features)` pairs, with the
placeholders zeroed (Granite 4 Vision): every pair reaches upstream's logits, generation matches transformers where
transformers is right, and beams are exact where it is not (its expansion reorders a row's images)."""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.references import (
    SYSTEM,
    USER,
    Prompt,
    assert_close,
    assert_same_steps,
    generate_logits,
    reference_next_logits,
)
from vlmprep.testing import IMAGE, VisionRunCounter

DEEPSTACK_PAIR_FAMILIES = ["granite4_vision"]
MIN_EFFECT = 1e-3  # a pair changes upstream's logits after the image by more than this


@pytest.mark.parametrize("family", DEEPSTACK_PAIR_FAMILIES)
def test_every_kept_pair_reaches_the_logits(family):
    """Zeroing the rows of a layer's last pair (upstream keeps only that one) changes upstream's logits: the tiny
    model fails if those rows are wrong."""
    upstream, _ = model_pair(family)
    inputs = Prompt(upstream.config, [SYSTEM, IMAGE, USER]).inputs()
    pixels = {key: inputs.pop(key) for key in ("pixel_values", "image_sizes")}
    with torch.no_grad():
        encoded = upstream.model.get_image_features(**pixels, return_dict=True)
        reference = upstream(**inputs, mm_encoder_outputs={"image": encoded}, use_cache=False).logits[:, -1]
        pairs = list(encoded.deepstack_features)
        kept = {layer: index for index, (layer, _) in enumerate(pairs)}  # a layer's last pair
        assert len(kept) == upstream.config.text_config.num_hidden_layers, "every decoder layer gets a pair"
        for layer, index in kept.items():
            rows = pairs[index][1]
            encoded.deepstack_features = [*pairs[:index], (layer, [r * 0 for r in rows]), *pairs[index + 1 :]]
            changed = upstream(**inputs, mm_encoder_outputs={"image": encoded}, use_cache=False).logits[:, -1]
            assert (changed - reference).abs().max() > MIN_EFFECT, f"pair {index} (layer {layer}) is not seen"


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
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, IMAGE, [30]], image_seeds=[0, 1])
    reference = reference_next_logits(upstream, prompt)
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, num_beams=3)
    for beam in range(3):  # every beam starts from the prompt: its first logits are the prompt's
        assert_close(logits[0][beam], reference[0])
    _, upstream_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=1, num_beams=3)
    assert not torch.allclose(upstream_logits[0][1], reference[0], atol=1e-4), "upstream feeds A, A, B, B"
