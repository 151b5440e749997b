"""The conformance suite's family registry: every family's case, the family groups and the conformance scenarios.

A family is registered by a `support/families/cases_*.py` module calling `register(FamilyCase(...))`
(`support.cases`); importing this module imports every one of them. Every scenario test is parameterized over
`FAMILY_CASES`, so a new family runs the whole suite by adding one case.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from support import families
from support.cases import FAMILY_CASES, FamilyCase, register

__all__ = [
    "FAMILY_CASES",
    "SCENARIOS",
    "FamilyCase",
    "Scenario",
    "declare_scenario",
    "load_scenarios",
    "register",
    "scenario",
    "skip_marks",
]


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


# The conformance scenarios, filled as the scenario test files are imported: `@scenario` registers a test (and
# parametrizes it over the families), `declare_scenario` a scenario a test runs otherwise (the bad-input cases).
# `load_scenarios` imports every file, for `utils/families_table.py`, which writes them into docs/families.md.
SCENARIOS: dict[str, Scenario] = {}
SCENARIOS_DIR = pathlib.Path(__file__).resolve().parents[1] / "scenarios"


def declare_scenario(name: str, source: str, families: tuple[str, ...] | None = None) -> Scenario:
    """Add a conformance scenario; declaring the same one again (another test of it) changes nothing.

    Args:
        name (`str`): the scenario's name, the key a `FamilyCase.skip` uses.
        source (`str`): the test file that runs it, relative to the repository (`tests/scenarios/test_generate.py`).
        families (`tuple[str, ...]`, *optional*): the families it is limited to; every registered family by default.

    Returns:
        `Scenario`
    """
    declared_scenario = Scenario(name, source, families)
    known = SCENARIOS.setdefault(name, declared_scenario)
    if known != declared_scenario:
        raise ValueError(f"Scenario {name!r} is declared twice, differently: {known} and {declared_scenario}.")
    return declared_scenario


def scenario(test: Callable | None = None, *, name: str | None = None, families: tuple[str, ...] | None = None):
    """Register a test as a conformance scenario and parametrize its `family` argument over the families that run it
    (the others marked skip with their case's reason).

    Use it bare (`@scenario`: the scenario is named after the test, without `test_`) or with a `name` (several tests
    of one scenario) or `families` (a scenario only some families run).
    """

    def register_and_parametrize(function: Callable) -> Callable:
        scenario_name = name or function.__name__.removeprefix("test_")
        path = pathlib.Path(inspect.getfile(function)).resolve()
        declare_scenario(scenario_name, str(path.relative_to(SCENARIOS_DIR.parents[1])), families)
        return pytest.mark.parametrize("family", _families_for(scenario_name))(function)

    return register_and_parametrize(test) if test is not None else register_and_parametrize


def load_scenarios() -> dict[str, Scenario]:
    """Every conformance scenario: imports each `tests/scenarios/test_*.py` as pytest does (by its file name, with
    its folder on `sys.path`), so a module pytest has imported already is not run again.

    Returns:
        `dict[str, Scenario]`: `SCENARIOS`, complete.
    """
    if str(SCENARIOS_DIR) not in sys.path:
        sys.path.insert(0, str(SCENARIOS_DIR))
    for path in sorted(SCENARIOS_DIR.glob("test_*.py")):
        importlib.import_module(path.stem)
    return SCENARIOS


def skip_marks(family: str, name: str) -> list:
    """`[pytest.mark.skip(reason)]` when the family's case skips the declared scenario `name`, `[pytest.mark.slow]`
    when its case runs it only under `make test-slow`, else `[]`."""
    case = FAMILY_CASES[family]
    reason = case.skip.get(SCENARIOS[name].name)
    if reason:
        return [pytest.mark.skip(reason=reason)]
    return [pytest.mark.slow] if SCENARIOS[name].name in case.slow else []


def _families_for(name: str) -> list:
    """`pytest.param`s of the families that run the declared scenario `name`, the others marked skip with a reason."""
    limited = SCENARIOS[name].families
    families = limited if limited is not None else sorted(FAMILY_CASES)
    return [pytest.param(family, id=family, marks=skip_marks(family, name)) for family in families]
