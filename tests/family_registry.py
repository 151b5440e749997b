"""The conformance suite's family registry: each family states how its processor builds prompts.

A family is registered by a `tests/families/cases_*.py` module calling `register(FamilyCase(...))`; every
scenario test is parameterized over `FAMILY_CASES`, so a new family runs the whole suite by adding one case.
"""

from __future__ import annotations

import importlib.util
import pathlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import transformers
from transformers import PreTrainedConfig, PreTrainedModel

from vlmprep.models.registry import FAMILY_SPECS
from vlmprep.testing import tiny_config


@dataclass
class FamilyCase:
    """How the conformance suite builds one family's prompts; its tiny config and reference class come from the
    registry (`vlmprep.models.registry.FAMILY_SPECS`).

    Args:
        name: the model type (a key of vlmprep's drop-in registry).
        build_inputs: `(config, segments, image_seeds) -> dict` with `input_ids`, the per-token inputs and the
            pixel inputs the family's processor would return; segments are lists of text ids or `IMAGE`.
        per_token_keys: inputs that run along the sequence (truncated with `input_ids`).
        pixel_keys: inputs that describe the images (dropped by `Prompt.inputs(with_pixels=False)`).
        skip: scenario name -> reason, for scenarios this family cannot run (stated in the families table).
        collate: `(prompts, pad_token_id) -> dict`, for families whose batches are not left-pad + concatenate.
        answer_token_types: per-token input -> its value at generated (text) tokens, where it is not 0: what the
            family's `generate` appends, so an uncached forward of a prompt and its answer is the reference of each
            step (PaliGemma's suffix tokens are 1, causal; its prompt is one bidirectional prefix of 0s).
    """

    name: str
    build_inputs: Callable[[PreTrainedConfig, list, list[int]], dict[str, torch.Tensor]]
    per_token_keys: tuple[str, ...] = ("token_type_ids",)
    pixel_keys: tuple[str, ...] = ("pixel_values",)
    skip: dict[str, str] = field(default_factory=dict)
    collate: Callable | None = None
    answer_token_types: dict[str, int] = field(default_factory=dict)

    @property
    def upstream_class(self) -> type[PreTrainedModel]:
        """The transformers class the drop-in replaces (the drop-in has its name)."""
        return getattr(transformers, FAMILY_SPECS[self.name].class_name)

    def make_config(self) -> PreTrainedConfig:
        """A fresh tiny config: the builder the registry names for this model type (`vlmprep.testing.tiny_config`)."""
        return tiny_config(self.name)


FAMILY_CASES: dict[str, FamilyCase] = {}


def register(case: FamilyCase) -> FamilyCase:
    FAMILY_CASES[case.name] = case
    return case


def _load_case_modules() -> None:
    for path in sorted((pathlib.Path(__file__).parent / "families").glob("cases_*.py")):
        spec = importlib.util.spec_from_file_location(f"family_cases_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_load_case_modules()


def families_for(scenario: str, families: list[str] | None = None) -> list:
    """`pytest.param`s of the families that run `scenario`, the others marked skip with their stated reason."""
    import pytest

    params = []
    for name in families if families is not None else sorted(FAMILY_CASES):
        reason = FAMILY_CASES[name].skip.get(scenario)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        params.append(pytest.param(name, id=name, marks=marks))
    return params
