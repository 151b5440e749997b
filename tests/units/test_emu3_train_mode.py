"""Emu3's VQ-VAE in train mode: `generate` refuses it clearly (its BatchNorm would make codes depend on the batch)."""

from __future__ import annotations

import pytest

from conftest import model_pair
from support.registry import FAMILY_CASES
from vlmprep.testing import IMAGE


def test_generate_refuses_a_vq_vae_in_train_mode():
    _, ours = model_pair("emu3")
    inputs = FAMILY_CASES["emu3"].build_inputs(ours.config, [[5], IMAGE, [6]], [0])
    ours.model.vqmodel.train()
    try:
        with pytest.raises(ValueError, match="vqmodel.eval"):
            ours.generate(**inputs, max_new_tokens=1)
    finally:
        ours.model.vqmodel.eval()
