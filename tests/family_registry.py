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

# Families by what their prompts hold, for the checks only they run. The Qwen-VL families keep multimodal rope deltas
# on the model upstream and tell videos from images by `mm_token_type_ids`; GLM's video frames are image placeholders,
# so (as upstream) one forward holds images or a video, never both; LLaVA-OneVision's and LLaVA-NeXT-Video's videos
# are one placeholder run each.
QWEN_FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"]
GLM_FAMILIES = ["glm4v", "glm4v_moe", "glm46v"]
LLAVA_VIDEO_FAMILIES = ["llava_onevision", "llava_next_video"]
IMAGE_AND_VIDEO_FAMILIES = [*LLAVA_VIDEO_FAMILIES, *QWEN_FAMILIES]  # an image and a video in one prompt


def register(case: FamilyCase) -> FamilyCase:
    FAMILY_CASES[case.name] = case
    return case


def _load_case_modules() -> None:
    for path in sorted((pathlib.Path(__file__).parent / "families").glob("cases_*.py")):
        spec = importlib.util.spec_from_file_location(f"family_cases_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_load_case_modules()


@dataclass(frozen=True)
class Scenario:
    """One conformance scenario: the name a `FamilyCase.skip` key uses, the test file that runs it, and the families
    it is limited to (`None`: every registered family)."""

    name: str
    source: str
    families: tuple[str, ...] | None = None


def _declare(test_file: str, *names: str) -> list[Scenario]:
    return [Scenario(name, f"tests/scenarios/{test_file}") for name in names]


# The conformance scenarios, by test file: each family runs each one unless its case skips it with a reason.
# `utils/families_table.py` writes them into docs/families.md; `families_for` refuses a name not declared here.
SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario
    for scenario in (
        *_declare(
            "test_bad_input.py",  # one per case of its `BAD_INPUTS`
            "bad_input_attention_mask_mismatch",
            "bad_input_cache_from_other_head_shape",
            "bad_input_cache_from_other_layer_count",
            "bad_input_cache_longer_than_prompt",
            "bad_input_placeholders_without_pixels",
            "bad_input_token_type_ids_mismatch",
            "bad_input_too_few_images",
            "bad_input_too_many_images",
            "bad_input_wrong_channels",
            "bad_input_wrong_resolution",
            "bad_input_wrong_run_length",
        ),
        *_declare(
            "test_cached_prefix.py",
            "cache_cropped_inside_image",
            "cache_from_prompt_truncated_inside_image",
            "cached_text_prefix_then_image_turn",
            "image_already_in_cache_is_not_encoded",
            "new_image_next_to_cached_image_encodes_only_the_new_one",
        ),
        *_declare(
            "test_chunked_prefill.py",
            "cached_prefix_of_every_length_with_chunks",
            "chunked_batch_matches_unchunked_batch",
            "every_chunk_size_is_exact",
        ),
        *_declare("test_differential.py", "differential"),
        *_declare(
            "test_generate.py",
            "generate_matches_transformers",
            "interleaved_requests_share_no_state",
            "left_padded_batch_matches_solo_runs",
            "save_pretrained_loads_in_transformers",
        ),
    )
}


def declared(scenario: str) -> Scenario:
    """The declared conformance scenario of that name; a name not in `SCENARIOS` is refused."""
    if scenario not in SCENARIOS:
        raise ValueError(f"{scenario!r} is no declared conformance scenario: add it to SCENARIOS in {__file__}")
    return SCENARIOS[scenario]


def skip_marks(family: str, scenario: str) -> list:
    """`[pytest.mark.skip(reason)]` when the family's case skips the declared `scenario`, else `[]`."""
    import pytest

    reason = FAMILY_CASES[family].skip.get(declared(scenario).name)
    return [pytest.mark.skip(reason=reason)] if reason else []


def families_for(scenario: str) -> list:
    """`pytest.param`s of the families that run the declared `scenario`, the others marked skip with their reason."""
    import pytest

    limited = declared(scenario).families
    families = limited if limited is not None else sorted(FAMILY_CASES)
    return [pytest.param(name, id=name, marks=skip_marks(name, scenario)) for name in families]
