"""Shared fixtures: tiny models saved with `save_pretrained` and loaded back, built once per session."""

from __future__ import annotations

import tempfile

import pytest
import torch
import transformers

import vlmprep
from vlmprep.testing import tiny_config

FOUNDATION_FAMILIES = ["gemma3", "paligemma", "llava"]

UPSTREAM_CLASSES = {
    "gemma3": transformers.Gemma3ForConditionalGeneration,
    "paligemma": transformers.PaliGemmaForConditionalGeneration,
    "llava": transformers.LlavaForConditionalGeneration,
}

_PAIRS: dict[str, tuple[torch.nn.Module, torch.nn.Module]] = {}


def model_pair(family: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(transformers model, vlmprep drop-in) with the same random weights, through the real loading path."""
    if family not in _PAIRS:
        torch.manual_seed(0)
        directory = tempfile.mkdtemp(prefix=f"vlmprep-{family}-")
        UPSTREAM_CLASSES[family](tiny_config(family)).save_pretrained(directory)
        upstream = UPSTREAM_CLASSES[family].from_pretrained(directory).eval()
        ours = vlmprep.AutoModelForImageTextToText.from_pretrained(directory).eval()
        _PAIRS[family] = (upstream, ours)
    return _PAIRS[family]


@pytest.fixture(autouse=True)
def _fresh_encoder_caches():
    """Every test starts with empty encoder caches, so vision-run counts do not depend on test order."""
    for _, ours in _PAIRS.values():
        if ours.encoder_cache is not None:
            ours.encoder_cache.clear()
    yield
