"""The conformance suite's family registry: every family's case, the family groups and the conformance scenarios.

A family is registered by a `support/families/cases_*.py` module calling `register(FamilyCase(...))`
(`support.cases`); importing this module imports every one of them. Every scenario test is parameterized over
`FAMILY_CASES`, so a new family runs the whole suite by adding one case.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from support import families
from support.cases import FAMILY_CASES, FamilyCase, register

__all__ = ["FAMILY_CASES", "SCENARIOS", "FamilyCase", "Scenario", "families_for", "register", "skip_marks"]


# Families by what their prompts hold, for the checks only they run. The Qwen-VL families keep multimodal rope deltas
# on the model upstream and tell videos from images by `mm_token_type_ids`; GLM's video frames are image placeholders,
# so (as upstream) one forward holds images or a video, never both; LLaVA-OneVision's and LLaVA-NeXT-Video's videos
# are one placeholder run each.
QWEN_FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"]
GLM_FAMILIES = ["glm4v", "glm4v_moe", "glm46v"]
LLAVA_VIDEO_FAMILIES = ["llava_onevision", "llava_next_video"]
IMAGE_AND_VIDEO_FAMILIES = [*LLAVA_VIDEO_FAMILIES, *QWEN_FAMILIES]  # an image and a video in one prompt


def _import_case_modules() -> None:
    # Each module of `support.families` registers its cases (`support.cases.register`) when imported.
    for module in sorted(pkgutil.iter_modules(families.__path__), key=lambda module: module.name):
        importlib.import_module(f"{families.__name__}.{module.name}")


_import_case_modules()


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
