"""`utils/families_table.py`: the families table lists every image-text-to-text model type, and `--check` notices
when `docs/families.md` is stale."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import types

import pytest
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

from support.registry import FAMILY_CASES, Scenario
from vlmprep.models import DROP_IN_CLASSES, registry
from vlmprep.models.base import VisionPrepMixin
from vlmprep.models.registry import ALIAS, FAMILY_SPECS, NOT_ADAPTED_REASONS

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "utils" / "families_table.py"


@pytest.fixture(scope="module")
def families_table() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("families_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rendered(families_table) -> tuple[str, list[str], list[str]]:
    return families_table.render()


def _table_rows(document: str) -> dict[str, str]:
    rows = {}
    for line in document.splitlines():
        if line.startswith("| `") and line.count("|") >= 7:
            rows[line.split("`")[1]] = line
    return rows


def _escape_pipes(text: str) -> str:
    return text.replace("|", "\\|")


def test_table_lists_every_image_text_to_text_model_type(rendered):
    document, errors, _ = rendered
    assert errors == []
    rows = _table_rows(document)
    assert set(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES) <= set(rows)
    assert len(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES) >= 100  # transformers 5.24, the lowest supported
    for model_type, class_name in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.items():
        assert f"`{class_name}`" in rows[model_type]


def test_every_model_type_has_a_drop_in_or_a_reason():
    for model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        assert model_type in DROP_IN_CLASSES or NOT_ADAPTED_REASONS.get(model_type), model_type
    for model_type, reason in NOT_ADAPTED_REASONS.items():
        assert "\n" not in reason and len(reason) > 20, model_type


def test_registry_module_defines_no_drop_in_class():
    assert not [
        value for value in vars(registry).values() if isinstance(value, type) and issubclass(value, VisionPrepMixin)
    ]


def test_drop_ins_and_not_adapted_families_are_marked(rendered):
    document, _, _ = rendered
    rows = _table_rows(document)
    for model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        spec = FAMILY_SPECS[model_type]
        assert f"| {spec.status} |" in rows[model_type]
        if spec.status == ALIAS:
            assert f"{DROP_IN_CLASSES[model_type].__qualname__}` (alias of `{spec.alias_of}`)" in rows[model_type]
        elif model_type in DROP_IN_CLASSES:
            assert DROP_IN_CLASSES[model_type].__qualname__ in rows[model_type]
            assert f"### `{model_type}`" in document
        else:
            assert "transformers class (not adapted)" in rows[model_type]
            assert _escape_pipes(spec.reason) in rows[model_type]


def test_scenarios_come_from_their_test_files_and_every_skip_names_one(families_table):
    scenarios = families_table.load_scenarios()
    names = {scenario.name for scenario in scenarios}
    assert {"generate_matches_transformers", "every_chunk_size_is_exact", "bad_input_too_many_images"} <= names
    for scenario in scenarios:
        assert (ROOT / scenario.source).is_file(), scenario
    for family, case in FAMILY_CASES.items():
        assert set(case.skip) <= names, f"{family} skips scenarios no test declares: {set(case.skip) - names}"


def test_skip_reasons_appear_with_their_scenario(families_table):
    case = types.SimpleNamespace(skip={"every_chunk_size_is_exact": "a specific reason"})
    scenarios = [
        Scenario("every_chunk_size_is_exact", "t.py"),
        Scenario("only_for_others", "t.py", families=("other",)),
    ]
    document, errors, warnings = families_table.build_table(
        mapping={"fam": "FamClass", "old": "OldClass"},
        drop_ins={"fam": families_table.DROP_IN_CLASSES.get("gemma3", object)},
        reasons={"old": "a true reason", "fam": "stale"},
        cases={"fam": case},
        scenarios=scenarios,
        text_only={"old"},
    )
    assert errors == []
    assert any("remove them from NOT_ADAPTED_REASONS: fam" in warning for warning in warnings)
    assert "- `every_chunk_size_is_exact`: a specific reason" in document
    assert "only_for_others" not in document.split("## Scenarios")[0]
    rows = _table_rows(document)
    assert "0 run, 1 skipped" in rows["fam"] and "a true reason" in rows["old"]


def test_missing_reason_is_an_error(families_table):
    _, errors, _ = families_table.build_table(
        mapping={"new": "NewClass"}, drop_ins={}, reasons={}, cases={}, scenarios=[], text_only=set()
    )
    assert errors and "new" in errors[0]


def test_check_mode_fails_on_a_stale_file(families_table, rendered, tmp_path, monkeypatch, capsys):
    document, _, _ = rendered
    monkeypatch.setattr(families_table, "render", lambda: rendered)
    monkeypatch.setattr(families_table, "DOC_PATH", tmp_path / "families.md")
    assert families_table.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().out
    assert families_table.main([]) == 0
    assert (tmp_path / "families.md").read_text() == document
    assert families_table.main(["--check"]) == 0
