"""Chameleon images of another size than the VQ-VAE's `resolution`: upstream's VQ-VAE codes any size (its own model
tests feed 10 px images to a 512 px config), so the drop-in counts the codes from the pixels passed (found by
transformers' own Chameleon model tests: "image 0 needs 65536 tokens, 25 left")."""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.references import assert_close, assert_same_steps, greedy_output
from vlmprep.testing import VisionRunCounter


def test_images_of_another_size_generate_as_upstream():
    upstream, ours = model_pair("chameleon")
    config = ours.config
    side = 24  # two halvings in the tiny VQ-VAE: a 6x6 grid, where `resolution` (16 px) gives 4x4
    assert config.vq_config.resolution != side
    generator = torch.Generator().manual_seed(0)
    pixel_values = torch.randn(2, 3, side, side, generator=generator)
    image_run = [config.image_token_id] * 36
    input_ids = torch.tensor([[5, 6, *image_run, 7, *image_run, 8]])
    kwargs = {"max_new_tokens": 3, "do_sample": False, "output_logits": True, "return_dict_in_generate": True}
    with VisionRunCounter(ours) as runs:
        actual = ours.generate(input_ids=input_ids, pixel_values=pixel_values, prefill_chunk_size=20, **kwargs)
    expected = upstream.generate(input_ids=input_ids, pixel_values=pixel_values, **kwargs)
    assert torch.equal(actual.sequences, expected.sequences)
    for ours_step, upstream_step in zip(actual.logits, expected.logits, strict=True):
        torch.testing.assert_close(ours_step, upstream_step, rtol=1e-5, atol=1e-5)
    assert runs.images == 2
    # The two images give other logits upstream: the test can fail.
    with torch.no_grad():
        other = upstream(input_ids=input_ids, pixel_values=pixel_values.flip(0)).logits[:, -1]
    assert not torch.allclose(other, expected.logits[0], atol=1e-3)


def assert_same_generation(actual, expected) -> None:
    assert torch.equal(actual.sequences, expected.sequences)
    assert_same_steps(actual.logits, expected.logits)


def images_of_another_size() -> tuple[list[int], torch.Tensor]:
    # Two 24 px images (6x6 codes each, where the config's `resolution` gives 4x4), between text
    generator = torch.Generator().manual_seed(0)
    return [model_pair("chameleon")[1].config.image_token_id] * 36, torch.randn(2, 3, 24, 24, generator=generator)


def test_continuing_a_returned_cache_without_pixels_as_upstream():
    """The second call passes the conversation and the first call's cache, not the pixels (its images are all in
    the cache): the drop-in cannot count their codes from pixels, and needs not, as upstream does not."""
    upstream, ours = model_pair("chameleon")
    image, pixel_values = images_of_another_size()
    input_ids = torch.tensor([[1, 5, *image, 7, *image, 8, 9]])
    outputs = {}
    for name, model in (("upstream", upstream), ("ours", ours)):
        first = greedy_output(model, {"input_ids": input_ids, "pixel_values": pixel_values}, 2)
        follow_up = torch.cat([first.sequences, torch.tensor([[10, 11]])], dim=1)
        with VisionRunCounter(model) as runs:
            outputs[name] = greedy_output(model, {"input_ids": follow_up}, 3, cache=first.cache)
        assert name == "upstream" or runs.calls == 0  # the images are in the cache: nothing is encoded
    assert_same_generation(outputs["ours"], outputs["upstream"])
    # ...which is one uncached forward of the whole conversation, with its images
    with torch.no_grad():
        whole = upstream(input_ids=outputs["upstream"].sequences[:, :-1], pixel_values=pixel_values).logits
    assert_close(outputs["ours"].logits[-1], whole[:, -1])


def test_assisted_decoding_without_pixels_in_the_assistant_as_upstream():
    """Prompt lookup, and the drop-in as an assistant model (transformers hands it no pixels after its first call)."""
    upstream, ours = model_pair("chameleon")
    image, pixel_values = images_of_another_size()
    # The answer repeats the prompt's last tokens, so drafts are accepted (text only: the images come first)
    inputs = {"input_ids": torch.tensor([[1, 5, *image, 7, *image, 0, 0, 0, 0, 0]]), "pixel_values": pixel_values}
    expected = greedy_output(upstream, inputs, 6)
    with VisionRunCounter(ours) as runs:
        assert_same_generation(greedy_output(ours, inputs, 6, prompt_lookup_num_tokens=3), expected)
    assert runs.images == 2
    for main in (upstream, ours):
        assert_same_generation(greedy_output(main, inputs, 6, assistant_model=ours), expected)


def test_an_image_cut_by_the_cache_without_pixels_is_refused():
    # The rows after the cache need the image's codes, which only its pixels give (upstream would embed the
    # placeholders as text)
    upstream, ours = model_pair("chameleon")
    image, pixel_values = images_of_another_size()
    input_ids = torch.tensor([[1, 5, *image, 7, *image, 8]])
    first = greedy_output(ours, {"input_ids": input_ids, "pixel_values": pixel_values}, 1)
    first.cache.crop(20 - first.cache.get_seq_length())  # the cache ends inside the first image
    with pytest.raises(ValueError, match="no pixel inputs were passed.*Pass `pixel_values`"):
        greedy_output(ours, {"input_ids": first.sequences}, 1, cache=first.cache)
