"""The declared transformers range is the tested range (utils/check_transformers_range.py), the installed release is
one of the tested ones, and a release outside the range is refused at import with what to install."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import types

import pytest
import transformers
from packaging.version import Version

from vlmprep.utils import _compat

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "utils" / "check_transformers_range.py"


@pytest.fixture(scope="module")
def range_check() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("check_transformers_range", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_declared_range_is_the_tested_range(range_check):
    assert range_check.range_problems() == []


def test_the_installed_transformers_is_a_tested_minor_release():
    # A suite run on an untested release is a bring-up (docs/contributing.md): add it to TESTED_TRANSFORMERS first.
    installed = Version(transformers.__version__)
    tested = {(Version(v).major, Version(v).minor) for v in _compat.TESTED_TRANSFORMERS}
    assert (installed.major, installed.minor) in tested, transformers.__version__


@pytest.mark.parametrize(
    ("dependency", "problem"),
    [
        ('"transformers>=5.24,<6"', "must end before 5.26.0"),
        ('"transformers>=5.23,<5.26"', "must start at 5.24.0 (the first tested release)"),
        ('"transformers>=5.24"', "must end before 5.26.0"),
        ('"transformers>=5.24,<5.26,!=5.25.0"', "specifiers other than"),
    ],
)
def test_a_range_reaching_an_untested_release_fails(range_check, tmp_path, dependency, problem):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f'[project]\nname = "x"\ndependencies = [{dependency}]\n')
    assert any(problem in line for line in range_check.range_problems(pyproject)), range_check.range_problems(
        pyproject
    )


def test_a_serving_extra_reaching_before_the_server_vlmprep_extends_fails(range_check, tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\ndependencies = ["transformers>=5.24,<5.26"]\n'
        '[project.optional-dependencies]\nserving = ["transformers[serving]>=5.24,<5.26"]\n'
    )
    assert range_check.range_problems(pyproject) == [
        "extra serving: `transformers[serving]<5.26,>=5.24` must start at 5.25.0 (the first tested release with the "
        "server vlmprep extends)"
    ]


def test_a_minor_release_skipped_in_the_tested_list_fails(range_check, monkeypatch):
    monkeypatch.setattr(range_check, "TESTED_TRANSFORMERS", ("5.23.0", "5.25.0"))
    monkeypatch.setattr(range_check, "MIN_TRANSFORMERS", "5.23.0")
    assert "transformers 5.24 lies inside the range but was not tested" in range_check.range_problems()


@pytest.mark.parametrize("installed", ["5.23.0", "5.26.0", "6.0.0"])
def test_import_refuses_an_untested_release_naming_what_to_install(monkeypatch, installed):
    monkeypatch.setattr(_compat.transformers, "__version__", installed)
    monkeypatch.delenv(_compat.ALLOW_UNTESTED_ENV, raising=False)
    with pytest.raises(ImportError, match=rf"transformers {installed} is installed.*pip install 'transformers>=5\.24"):
        _compat.check_transformers_version()


def test_bringing_up_a_release_can_import_it_with_a_warning(monkeypatch):
    monkeypatch.setattr(_compat.transformers, "__version__", "5.26.0")
    monkeypatch.setenv(_compat.ALLOW_UNTESTED_ENV, "1")
    with pytest.warns(UserWarning, match="tested with transformers 5.24.0, 5.25.0"):
        _compat.check_transformers_version()


def test_the_server_is_refused_before_the_release_it_extends():
    assert _compat.serving_unsupported_message("5.25.0") is None
    message = _compat.serving_unsupported_message("5.24.0")
    assert "vlmprep[serving]" in message and "5.25.0" in message and "5.24.0" in message
