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
from vlmprep.models.family_spec import blocked_upstream, drop_in
from vlmprep.models.registry import ALIAS, ALL_FAMILY_SPECS, FAMILY_SPECS, NEWER_FAMILY_SPECS, NOT_ADAPTED_REASONS

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "utils" / "families_table.py"
DOC = ROOT / "docs" / "families.md"


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
    monkeypatch.setattr(families_table, "NEWER_FAMILY_SPECS", {})  # the installed release as the newest
    monkeypatch.setattr(families_table, "DOC_PATH", tmp_path / "families.md")
    assert families_table.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().out
    assert families_table.main([]) == 0
    assert (tmp_path / "families.md").read_text() == document
    assert families_table.main(["--check"]) == 0


def test_document_covers_every_type_of_the_newest_supported_release():
    # transformers 5.25 has 103 image-text-to-text types; under 5.24 the 3 it added are the registry's newer specs
    rows = _table_rows(DOC.read_text())
    assert set(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES) | set(NEWER_FAMILY_SPECS) <= set(rows)
    assert set(rows) <= set(ALL_FAMILY_SPECS)
    assert len(rows) >= 103
    for model_type, spec in NEWER_FAMILY_SPECS.items():
        # a type the installed release lacks, or has with the spec its release sees (`older`: fixed upstream later)
        assert spec.since and (model_type not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES or spec.older), model_type
        assert f"| {spec.status} |" in rows[model_type]


def test_newer_types_have_a_release_and_the_installed_one_has_the_others():
    # A type starting at a release states it (the types transformers 5.25 added, and those it made adaptable)
    newer = {model_type: spec.since for model_type, spec in ALL_FAMILY_SPECS.items() if spec.since}
    assert len(newer) >= 3 and set(newer.values()) == {"5.25"}, newer
    for model_type, spec in FAMILY_SPECS.items():
        assert spec.installed
        if model_type in NEWER_FAMILY_SPECS:  # the installed release sees the spec a later one replaces
            assert spec is ALL_FAMILY_SPECS[model_type].older, model_type
    for model_type, spec in ALL_FAMILY_SPECS.items():
        if spec.older is not None:
            assert spec.since and spec.older.status != spec.status, model_type
    # an installed type's drop-in has a case; a newer type's case is left out, with the release it needs
    from support.cases import CASES_FOR_NEWER_TRANSFORMERS

    assert set(CASES_FOR_NEWER_TRANSFORMERS) == {t for t, s in NEWER_FAMILY_SPECS.items() if s.drop_in is not None}
    assert all(">=5.25" in reason for reason in CASES_FOR_NEWER_TRANSFORMERS.values())
    assert not set(NEWER_FAMILY_SPECS) & set(FAMILY_CASES)


def test_a_spec_starting_later_gives_older_releases_its_older_spec():
    older = blocked_upstream("the forward fails on every call before 9.9")
    spec = drop_in("fam.FamForConditionalGeneration", since="9.9", older=older)
    assert not spec.installed and spec.older is older and older.installed
    with pytest.raises(ValueError, match="starts at a release"):
        drop_in("fam.FamForConditionalGeneration", older=older)


def _two_release_documents(families_table) -> tuple[str, str]:
    # The same registry as the newest release renders it (with the type `new` it added) and as an older one does
    scenarios = [Scenario("every_chunk_size_is_exact", "t.py")]
    gemma3 = families_table.DROP_IN_CLASSES.get("gemma3", object)
    arguments = {"reasons": {"old": "a true reason"}, "scenarios": scenarios, "text_only": set()}
    case = types.SimpleNamespace(skip={})
    newest, _, _ = families_table.build_table(
        mapping={"fam": "FamClass", "new": "NewClass", "old": "OldClass"},
        drop_ins={"fam": gemma3, "new": gemma3},
        cases={"fam": case, "new": case},
        layouts={"fam": "fixed_image", "new": "fixed_image"},
        **arguments,
    )
    older, _, _ = families_table.build_table(
        mapping={"fam": "FamClass", "old": "OldClass"},
        drop_ins={"fam": gemma3},
        cases={"fam": case},
        layouts={"fam": "fixed_image"},
        **arguments,
    )
    return newest, older


def test_an_older_release_checks_the_types_it_has(families_table):
    newest, older = _two_release_documents(families_table)
    assert "`new`" in newest and "`new`" not in older
    assert families_table.older_release_problems(newest, older, {"new": "9.9"}) == []
    # a row of a type both releases have that is out of date is found; so is a newer type's row gone missing
    stale = newest.replace("a true reason", "an old reason")
    assert families_table.older_release_problems(stale, older, {"new": "9.9"})
    without_new = "\n".join(line for line in newest.splitlines() if not line.startswith("| `new`"))
    assert any(
        "no row for new" in problem
        for problem in families_table.older_release_problems(without_new, older, {"new": "9.9"})
    )


def test_an_older_release_sees_a_type_it_has_with_its_older_spec(families_table):
    # `old` is a drop-in from 9.9 (fixed upstream there); the older release renders its blocked row, not checked
    newest, older = _two_release_documents(families_table)
    fixed_later = older.replace("a true reason", "blocked before 9.9")
    assert families_table.older_release_problems(newest, fixed_later, {"new": "9.9", "old": "9.9"}) == []
    assert families_table.older_release_problems(newest, fixed_later, {"new": "9.9"})


def test_an_older_release_does_not_rewrite_the_newest_view(families_table, monkeypatch, tmp_path, capsys):
    newest, older = _two_release_documents(families_table)
    (tmp_path / "families.md").write_text(newest)
    monkeypatch.setattr(families_table, "DOC_PATH", tmp_path / "families.md")
    monkeypatch.setattr(families_table, "render", lambda: (older, [], []))
    monkeypatch.setattr(families_table, "NEWER_FAMILY_SPECS", {"new": types.SimpleNamespace(since="9.9")})
    assert families_table.main(["--check"]) == 0
    assert families_table.main([]) == 1
    assert "transformers>=9.9" in capsys.readouterr().out
    assert (tmp_path / "families.md").read_text() == newest
