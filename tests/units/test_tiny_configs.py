"""`vlmprep.testing.tiny_config`: every drop-in's registry entry names a builder of a tiny config of its model type."""

from __future__ import annotations

import pytest

from vlmprep.models.registry import FAMILY_SPECS
from vlmprep.testing import (
    TINY_CONFIG_BUILDERS,
    TINY_IMAGE_TOKEN_ID,
    TINY_VIDEO_TOKEN_ID,
    TINY_VOCAB_SIZE,
    tiny_config,
)

DROP_INS = sorted(model_type for model_type, spec in FAMILY_SPECS.items() if spec.drop_in is not None)


def test_every_drop_in_has_a_tiny_config_builder():
    assert sorted(TINY_CONFIG_BUILDERS) == DROP_INS
    for model_type in DROP_INS:
        assert TINY_CONFIG_BUILDERS[model_type].__name__ == FAMILY_SPECS[model_type].tiny_config


def _needs_a_third_layer(text_config) -> bool:
    scales_nope_queries = getattr(text_config, "attn_temperature_tuning", False) and getattr(
        text_config, "no_rope_layers", None
    )
    # A cross-attention layer caches no per-token keys and values: a self-attention layer after it holds the images'
    return bool(scales_nope_queries or getattr(text_config, "cross_attention_layers", None))


@pytest.mark.parametrize("model_type", DROP_INS)
def test_tiny_config_is_tiny_and_of_its_model_type(model_type):
    config = tiny_config(model_type)
    assert config.model_type == model_type
    text = config.get_text_config(decoder=True)
    # Two decoder layers; three where a layer's effect on the cache shows only in the layer after it (Llama 4: a
    # chunked RoPE layer, then two NoPE layers whose query scaling must reach a cached key; Llama 3.2 Vision: its
    # cross-attention layer between two self-attention layers)
    layers = 3 if _needs_a_third_layer(text) else 2
    assert (text.num_hidden_layers, text.hidden_size, text.vocab_size) == (layers, 32, TINY_VOCAB_SIZE)
    if hasattr(config, "image_token_id"):
        assert config.image_token_id == TINY_IMAGE_TOKEN_ID
    else:  # a family without images (InstructBLIP-Video)
        assert config.video_token_id == TINY_VIDEO_TOKEN_ID
    assert tiny_config(model_type) is not config  # a fresh config per call: tests may change theirs


def test_unknown_model_type_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="No tiny config for model type 'blip'.*gemma3"):
        tiny_config("blip")
