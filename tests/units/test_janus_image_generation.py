"""Janus keeps its own image generation (`generation_mode="image"`) as the drop-in; text goes through the mixin."""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from vlmprep import PrefixCache
from vlmprep.testing import TINY_BOI_TOKEN_ID

PROMPT = torch.tensor([[5, 6, 7, 8, TINY_BOI_TOKEN_ID]])


def image_generation_kwargs(model) -> dict:
    # Janus's image loop reads the start-of-image and padding ids from `generation_kwargs`, as its checkpoints'
    # generation configs state them; the classifier-free guidance runs a copy of each prompt padded with `pad_token_id`.
    model.generation_config.generation_kwargs = {"boi_token_id": TINY_BOI_TOKEN_ID, "pad_token_id": 0}
    return {"attention_mask": torch.ones_like(PROMPT), "pad_token_id": 0, "do_sample": False, "guidance_scale": 2.0}


def test_image_generation_matches_transformers():
    upstream, ours = model_pair("janus")
    expected = upstream.generate(PROMPT, generation_mode="image", **image_generation_kwargs(upstream))
    assert torch.equal(ours.generate(PROMPT, generation_mode="image", **image_generation_kwargs(ours)), expected)
    assert expected.shape == (1, upstream.config.vision_config.num_image_tokens)


def test_image_generation_refuses_a_prefix_cache():
    _, ours = model_pair("janus")
    with pytest.raises(ValueError, match="generation_mode='text'"):
        ours.generate(PROMPT, generation_mode="image", prefix_cache=PrefixCache(), **image_generation_kwargs(ours))
