"""Nemotron-H Omni: images and audio clips on a mamba decoder, exact against transformers in every generation mode,
each item encoded once; videos refused clearly. Its chunks cutting audio runs and its chat resuming from the prefix
store's mamba snapshots are tests/scenarios/test_audio.py's, run for every family that takes audio. The shared
`generate_matches_transformers` scenario is skipped for this family (upstream's beams repeat two images' features
image by image): here every mode is compared on one-image prompts, where upstream is right."""

from __future__ import annotations

import pytest
import torch
import transformers

from conftest import model_pair
from support.generation_checks import (
    GENERATION_MODES,
    assert_exact_without_an_audio_tower,
    assert_generate_matches_upstream,
    assert_refused_then_exact,
)
from support.references import SYSTEM, USER, Prompt
from vlmprep import NemotronH_Omni_Reasoning_V3
from vlmprep.testing import AUDIO, IMAGE, VisionRunCounter, tiny_model
from vlmprep.testing.configs import tiny_nemotron_h_omni_config

FAMILY = "nemotron_h_omni"


@pytest.mark.parametrize("mode", list(GENERATION_MODES))
def test_generate_matches_transformers_and_encodes_each_item_once(mode):
    upstream, ours = model_pair(FAMILY)
    ours.encoder_cache.clear()
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, AUDIO, [30]], image_seeds=[0, 1])
    with VisionRunCounter(ours) as runs:
        assert_generate_matches_upstream(upstream, ours, prompt.inputs(), mode, max_new_tokens=3)
    assert runs.batch_sizes == [1, 1], "the image once, the clip once (beams and samples share them)"


def test_videos_and_bad_audio_inputs_raise_clear_errors_then_the_model_is_still_exact():
    upstream, ours = model_pair(FAMILY)
    inputs = Prompt(ours.config, [SYSTEM, AUDIO, [30]], image_seeds=[1]).inputs()
    features, mask = inputs["input_features"], inputs["input_features_mask"]
    bad = [
        ({**inputs, "pixel_values_videos": torch.zeros(1, 1, 6, 16, 16)}, "Videos are not supported"),
        ({k: v for k, v in inputs.items() if not k.startswith("input_features")}, "no pixel inputs were passed"),
        (
            {**inputs, "input_features": features.repeat(2, 1, 1), "input_features_mask": mask.repeat(2, 1)},
            r"2 audio\(s\) were passed but the prompt has 1 audio placeholder run",
        ),
        ({**inputs, "input_features": features[..., :8]}, "mel bins"),
        ({**inputs, "input_features_mask": torch.cat([mask, mask[:, -1:]], dim=1)}, "one entry per frame"),
    ]
    assert_refused_then_exact(upstream, ours, inputs, bad)


def test_checkpoint_without_audio_tower():
    config = tiny_nemotron_h_omni_config()
    config.audio_config = None  # as checkpoints without a sound encoder
    upstream = tiny_model(transformers.NemotronH_Omni_Reasoning_V3, config).eval()
    assert_exact_without_an_audio_tower(upstream, NemotronH_Omni_Reasoning_V3(config).eval())
