"""Encoders holding BatchNorm layers in train mode: `generate` refuses to encode items with them, saying how to fix it.

In train mode BatchNorm normalizes over the items encoded together and updates its running statistics, and the
drop-in encodes only the items prefill needs, once each: its features, and the layers' statistics for every later
call, would part from transformers' silently. The refusal leaves the statistics untouched, and in eval mode the
drop-in is exact again.
"""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.references import Prompt, assert_same_steps, generate_logits
from support.registry import FAMILY_CASES
from support.traits import encodes_with_batch_norm, families_with
from vlmprep.generation.batch_statistics import BATCH_NORM_LAYERS
from vlmprep.generation.encoding import encoding_module
from vlmprep.testing import AUDIO, IMAGE


@pytest.mark.parametrize("family", families_with(encodes_with_batch_norm))
def test_encoding_with_batch_norm_in_train_mode_is_refused_and_leaves_the_statistics(family):
    upstream, ours = model_pair(family)
    segments = [[5], IMAGE, [6], AUDIO, [7]] if FAMILY_CASES[family].builds_audio else [[5], IMAGE, [6]]
    inputs = Prompt(
        ours.config, segments, image_seeds=[1, 2][: segments.count(IMAGE) + segments.count(AUDIO)]
    ).inputs()
    norms = [module for module in encoding_module(ours).modules() if isinstance(module, BATCH_NORM_LAYERS)]
    statistics = [module.running_mean.clone() for module in norms]
    ours.encoder_cache.clear()  # the items must be encoded, not served
    for module in norms:
        module.train()
    try:
        with pytest.raises(ValueError, match="BatchNorm layers are in train mode|train mode"):
            ours.generate(**inputs, max_new_tokens=1)
    finally:
        for module in norms:
            module.eval()
    assert all(torch.equal(module.running_mean, before) for module, before in zip(norms, statistics, strict=True))
    _, logits = generate_logits(ours, inputs, max_new_tokens=2)
    _, expected = generate_logits(upstream, inputs, max_new_tokens=2)
    assert_same_steps(logits, expected)
