"""Chameleon images of another size than the VQ-VAE's `resolution`: upstream's VQ-VAE codes any size (its own model
tests feed 10 px images to a 512 px config), so the drop-in counts the codes from the pixels passed (found by
transformers' own Chameleon model tests: "image 0 needs 65536 tokens, 25 left")."""

from __future__ import annotations

import torch

from conftest import model_pair
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
