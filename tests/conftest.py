"""Shared fixtures: tiny models saved with `save_pretrained` and loaded back, built once per session."""

from __future__ import annotations

import tempfile

import pytest
import torch

import vlmprep
from support.registry import FAMILY_CASES
from support.traits import families_with, sampled
from vlmprep.testing import tiny_model

# Tiny models: one thread avoids the scheduling overhead that dominates their matmuls on a shared 2-core machine.
torch.set_num_threads(1)

FOUNDATION_FAMILIES = families_with(sampled("foundation"))
ALL_FAMILIES = sorted(FAMILY_CASES)

_PAIRS: dict[str, tuple[torch.nn.Module, torch.nn.Module]] = {}


def model_pair(family: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(transformers model, vlmprep drop-in) with the same random weights, through the real loading path.

    The weights are `vlmprep.testing.tiny_model`'s: upstream's initialisation with seed 0, with the multimodal
    weights upstream leaves zero re-drawn, so every image changes the logits (tests/scenarios/
    test_image_sensitivity.py checks it per family).
    """
    if family not in _PAIRS:
        directory = tempfile.mkdtemp(prefix=f"vlmprep-{family}-")
        case = FAMILY_CASES[family]
        tiny_model(case.upstream_class, case.make_config(), seed=0).save_pretrained(directory)
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


# Tests that start processes of their own (servers, tensor-parallel ranks) and time them against deadlines: under
# `make test`'s two workers they all run on one worker, one at a time, so two of them never share the cores.
_PROCESS_TEST_DIRECTORIES = ("cli", "scaling")


def pytest_collection_modifyitems(config, items):
    """Puts the process-starting tests in one xdist group (a no-op without pytest-xdist's `--dist loadgroup`)."""
    for item in items:
        if item.path.parent.name in _PROCESS_TEST_DIRECTORIES:
            item.add_marker(pytest.mark.xdist_group("processes"))
