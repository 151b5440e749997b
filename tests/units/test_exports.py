"""Every drop-in is importable from `vlmprep` by its transformers name, lazily, and `utils/check_exports.py` agrees."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

import vlmprep
from vlmprep.models import DROP_IN_CLASSES
from vlmprep.models.base import VisionPrepMixin

ROOT = pathlib.Path(__file__).resolve().parents[2]
DROP_IN_NAMES = sorted({cls.__name__ for cls in DROP_IN_CLASSES.values()})  # alias types share their base's class


def test_every_drop_in_is_discovered():
    # A registered family that stops being discovered (or exported) would silently drop its export.
    from vlmprep.models import DROP_IN_MODULES
    from vlmprep.models.registry import ALL_FAMILY_SPECS, FAMILY_SPECS

    registered = sorted(spec.drop_in.rsplit(".", 1)[1] for spec in FAMILY_SPECS.values() if spec.drop_in is not None)
    assert registered == DROP_IN_NAMES
    # The static table names the drop-ins of every supported transformers (those the installed one lacks included)
    every = sorted(spec.class_name for spec in ALL_FAMILY_SPECS.values() if spec.drop_in is not None)
    assert every == sorted(DROP_IN_MODULES)
    assert len(DROP_IN_NAMES) >= 32  # the families of this release: none may go missing


@pytest.mark.parametrize("name", DROP_IN_NAMES)
def test_drop_in_importable_by_transformers_name(name):
    namespace: dict = {}
    exec(f"from vlmprep import {name}", namespace)
    drop_in = namespace[name]
    assert drop_in in DROP_IN_CLASSES.values()
    assert issubclass(drop_in, VisionPrepMixin)
    # same name as the transformers class it subclasses: the import line is the only change
    assert any(base.__module__.startswith("transformers.") and base.__name__ == name for base in drop_in.__mro__)
    assert name in vlmprep.__all__ and name in dir(vlmprep)


def test_unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="NotAModelForConditionalGeneration"):
        vlmprep.NotAModelForConditionalGeneration  # noqa: B018


def test_import_vlmprep_imports_no_model_module():
    # A fresh interpreter: this test session has imported the family modules already.
    code = (
        "import json, sys, vlmprep\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('vlmprep'))))\n"
        "vlmprep.Qwen2VLForConditionalGeneration\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('vlmprep.models.'))))\n"
    )
    env_path = str(ROOT / "src")
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": env_path},
    )
    before, after = (json.loads(line) for line in result.stdout.splitlines())
    assert before == ["vlmprep", "vlmprep.models", "vlmprep.utils", "vlmprep.utils._compat"]
    # the first use imports that family, the drop-ins' base and the layout it picks, not the registry or any other family
    assert after == [
        "vlmprep.models.base",
        "vlmprep.models.layouts",
        "vlmprep.models.layouts.patch_grid",
        "vlmprep.models.qwen2_vl",
    ]


def _load_check_exports():
    spec = importlib.util.spec_from_file_location("check_exports", ROOT / "utils" / "check_exports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_check_exports_passes_and_notices_a_missing_export(monkeypatch):
    check_exports = _load_check_exports()
    assert check_exports.problems() == []
    monkeypatch.setattr(
        vlmprep, "__all__", [name for name in vlmprep.__all__ if name != "Qwen2VLForConditionalGeneration"]
    )
    assert "Qwen2VLForConditionalGeneration is not in vlmprep.__all__" in check_exports.problems()


def test_check_exports_notices_an_undocumented_drop_in(monkeypatch, tmp_path):
    check_exports = _load_check_exports()
    reference = tmp_path / "reference.md"
    reference.write_text(check_exports.REFERENCE.read_text().replace("`Qwen3VLForConditionalGeneration`", "Qwen3VL"))
    monkeypatch.setattr(check_exports, "REFERENCE", reference)
    found = check_exports.problems()
    assert "Qwen3VLForConditionalGeneration is not named in docs/reference.md" in found
    assert any("generated block of" in problem and "stale" in problem for problem in found)
