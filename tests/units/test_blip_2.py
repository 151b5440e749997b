"""BLIP-2 beyond the conformance matrix: upstream's `generate` signature, calls transformers' class cannot run, and
the Flan-T5 checkpoints the drop-in refuses."""

from __future__ import annotations

import pytest
import torch
import transformers

from conftest import model_pair
from vlmprep import AutoModelForImageTextToText, EncoderCache
from vlmprep.models.blip_2 import Blip2ForConditionalGeneration
from vlmprep.testing import VisionRunCounter, random_pixels, tiny_config

GREEDY = {"max_new_tokens": 3, "do_sample": False, "output_logits": True, "return_dict_in_generate": True}


def test_captioning_without_prompt_matches_transformers():
    upstream, ours = model_pair("blip-2")
    pixels = random_pixels(2, seed=3)
    expected = upstream.generate(pixels, **GREEDY)  # upstream's signature: `pixel_values` first, no prompt
    with VisionRunCounter(ours) as runs:
        actual = ours.generate(pixels, **GREEDY)
    assert torch.equal(actual.sequences, expected.sequences)
    for step_actual, step_expected in zip(actual.logits, expected.logits, strict=True):
        torch.testing.assert_close(step_actual, step_expected, atol=1e-5, rtol=0)
    assert runs.calls == 1 and runs.images == 2


def test_text_only_prompt_matches_the_language_model():
    # transformers' class cannot generate without an image; its language model is what decodes any prompt upstream.
    upstream, ours = model_pair("blip-2")
    input_ids = torch.tensor([[2, 5, 6, 7, 122, 8]])  # a placeholder id as text: no image, the token itself
    with pytest.raises(ValueError, match="(?i)image"):
        ours.generate(input_ids=input_ids, max_new_tokens=1)
    input_ids = torch.tensor([[2, 5, 6, 7, 8]])
    expected = upstream.language_model.generate(input_ids=input_ids, **GREEDY)
    actual = ours.generate(input_ids=input_ids, **GREEDY)
    assert torch.equal(actual.sequences, expected.sequences)
    for step_actual, step_expected in zip(actual.logits, expected.logits, strict=True):
        torch.testing.assert_close(step_actual, step_expected, atol=1e-5, rtol=0)


def test_forward_without_return_dict_gives_upstreams_tuple():
    from support.references import Prompt
    from vlmprep.testing import IMAGE

    upstream, ours = model_pair("blip-2")
    inputs = Prompt(ours.config, [IMAGE, [5, 6, 7]]).inputs()
    with torch.no_grad():
        expected = upstream(**inputs, return_dict=False)
        actual = ours(**inputs, return_dict=False)
    assert isinstance(actual, tuple) and len(actual) == len(expected)
    torch.testing.assert_close(actual[0], expected[0], atol=1e-5, rtol=0)


def _larger_pixels(config, num_images: int, seed: int) -> torch.Tensor:
    # Larger than the tower's `image_size` and not square: only interpolated position embeddings fit them
    size = config.vision_config.image_size
    return torch.randn(num_images, 3, 2 * size, 3 * size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("with_prompt", [False, True], ids=["caption", "prompt"])
def test_interpolated_positions_on_larger_images_match_transformers(with_prompt):
    """Upstream's `generate(..., interpolate_pos_encoding=True)` runs on images larger than `image_size`; the drop-in
    refused it before."""
    from support.references import Prompt
    from vlmprep.testing import IMAGE

    upstream, ours = model_pair("blip-2")
    pixels = _larger_pixels(ours.config, 2, seed=4)
    inputs = {}
    if with_prompt:
        prompts = [Prompt(ours.config, [IMAGE, [5, 6, 7 + row]]) for row in range(2)]
        inputs = {"input_ids": torch.cat([prompt.input_ids for prompt in prompts])}
    expected = upstream.generate(pixels, **inputs, interpolate_pos_encoding=True, **GREEDY)
    with VisionRunCounter(ours) as runs:
        actual = ours.generate(pixels, **inputs, interpolate_pos_encoding=True, **GREEDY)
    assert torch.equal(actual.sequences, expected.sequences)
    for step_actual, step_expected in zip(actual.logits, expected.logits, strict=True):
        torch.testing.assert_close(step_actual, step_expected, atol=1e-5, rtol=0)
    assert runs.calls == 1 and runs.images == 2
    # The same kwarg on the forward, against upstream's forward
    forward_inputs = {"pixel_values": pixels, "input_ids": actual.sequences, "interpolate_pos_encoding": True}
    with torch.no_grad():
        torch.testing.assert_close(ours(**forward_inputs).logits, upstream(**forward_inputs).logits, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="pixel_values"):  # without the flag they do not fit the tower
        ours.generate(pixels, max_new_tokens=1)


def test_encoder_cache_keeps_interpolated_features_apart():
    """Features encoded with `interpolate_pos_encoding=True` are stored under another key than without: a call with
    the other flag encodes again, one with the same flag reuses them, each as upstream's `generate`."""
    upstream, ours = model_pair("blip-2")
    ours.encoder_cache = EncoderCache(max_bytes=2**24)
    pixels = _larger_pixels(ours.config, 1, seed=5)
    size = ours.config.vision_config.image_size
    at_size = pixels[..., :size, :size].contiguous()
    # At `image_size` both flags fit the tower; `False` passed or left out is upstream's default, one key
    for interpolate, encoded in ((True, 1), (None, 1), (True, 0), (False, 0)):
        flag = {} if interpolate is None else {"interpolate_pos_encoding": interpolate}
        expected = upstream.generate(at_size, **flag, **GREEDY)
        with VisionRunCounter(ours) as runs:
            actual = ours.generate(at_size, **flag, **GREEDY)
        assert torch.equal(actual.sequences, expected.sequences)
        torch.testing.assert_close(actual.logits[0], expected.logits[0], atol=1e-5, rtol=0)
        assert runs.images == encoded, (interpolate, runs.batch_sizes)


def _flan_t5_config() -> transformers.Blip2Config:
    config = tiny_config("blip-2").to_dict()
    text = {"model_type": "t5", "vocab_size": 128, "d_model": 32, "d_kv": 16, "d_ff": 64, "num_layers": 1}
    return transformers.Blip2Config(
        vision_config=config["vision_config"],
        qformer_config=config["qformer_config"],
        text_config={**text, "num_heads": 2, "decoder_start_token_id": 0},
        num_query_tokens=config["num_query_tokens"],
        image_token_index=config["image_token_index"],
    )


def test_flan_t5_checkpoints_are_refused_and_auto_loads_transformers_class():
    config = _flan_t5_config()
    with pytest.raises(ValueError, match="encoder-decoder"):
        Blip2ForConditionalGeneration(config)
    model = AutoModelForImageTextToText.from_config(config)
    assert type(model) is transformers.Blip2ForConditionalGeneration
