"""Shared fixtures: tiny models saved with `save_pretrained` and loaded back, built once per session."""

from __future__ import annotations

import tempfile

import pytest
import torch

import vlmprep
from family_registry import FAMILY_CASES

FOUNDATION_FAMILIES = ["gemma3", "paligemma", "llava"]
ALL_FAMILIES = sorted(FAMILY_CASES)

_PAIRS: dict[str, tuple[torch.nn.Module, torch.nn.Module]] = {}


def model_pair(family: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(transformers model, vlmprep drop-in) with the same random weights, through the real loading path."""
    if family not in _PAIRS:
        torch.manual_seed(0)
        directory = tempfile.mkdtemp(prefix=f"vlmprep-{family}-")
        case = FAMILY_CASES[family]
        case.upstream_class(case.make_config()).save_pretrained(directory)
        upstream = case.upstream_class.from_pretrained(directory).eval()
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
