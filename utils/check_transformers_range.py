"""Check that the transformers range pyproject.toml declares is the range the suite was run on, nothing more.

`vlmprep.utils._compat.TESTED_TRANSFORMERS` lists the releases the whole suite passed on; `.ci/run` runs it on the
first and the last. Every requirement on transformers in pyproject.toml (the dependency and each extra) must allow
exactly: from the first tested release up to the minor release after the last one, with every minor release in
between tested. A range that reaches a release nobody ran the suite on is how a new upstream release reached users
untested (issue 34): this check, run by `make repo-consistency` and tests/units/test_transformers_range.py, fails then.

Usage:
    python utils/check_transformers_range.py          # check; exit 1 naming each problem
    python utils/check_transformers_range.py --ends   # print the first and the last tested release (for .ci/run)
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

from vlmprep.utils._compat import (
    MAX_TRANSFORMERS_EXCLUSIVE,
    MIN_TRANSFORMERS,
    SERVING_MIN_TRANSFORMERS,
    TESTED_TRANSFORMERS,
)

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def transformers_requirements(pyproject: Path = PYPROJECT) -> dict[str, Requirement]:
    """Every requirement on transformers in a pyproject.toml, by where it is (`dependencies`, `extra <name>`)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    groups = {"dependencies": project.get("dependencies", [])}
    groups.update({f"extra {name}": items for name, items in project.get("optional-dependencies", {}).items()})
    found = {}
    for where, items in groups.items():
        for item in items:
            requirement = Requirement(item)
            if requirement.name == "transformers":
                found[where] = requirement
    return found


def _bounds(requirement: Requirement) -> tuple[Version | None, Version | None, list[str]]:
    lower = upper = None
    others = []
    for spec in requirement.specifier:
        if spec.operator == ">=":
            lower = Version(spec.version)
        elif spec.operator == "<":
            upper = Version(spec.version)
        else:
            others.append(str(spec))
    return lower, upper, others


def _next_minor(release: Version) -> Version:
    return Version(f"{release.major}.{release.minor + 1}.0")


def range_problems(pyproject: Path = PYPROJECT) -> list[str]:
    """What is wrong with the declared transformers range; empty when it is exactly the tested range.

    Args:
        pyproject (`Path`, *optional*): the pyproject.toml to read; defaults to this repository's.

    Returns:
        `list[str]`
    """
    tested = sorted(Version(release) for release in TESTED_TRANSFORMERS)
    problems = []
    if [str(release) for release in tested] != list(TESTED_TRANSFORMERS):
        problems.append("TESTED_TRANSFORMERS must list each release once, oldest first")
    lowest, highest = tested[0], _next_minor(tested[-1])
    if Version(MIN_TRANSFORMERS) != lowest or Version(MAX_TRANSFORMERS_EXCLUSIVE) != highest:
        problems.append(
            f"_compat's range >={MIN_TRANSFORMERS},<{MAX_TRANSFORMERS_EXCLUSIVE} is not the tested range "
            f">={lowest},<{highest}"
        )
    minors = {(release.major, release.minor) for release in tested}
    if lowest.major != tested[-1].major:
        problems.append("the tested range spans two major releases: keep it inside one")
    else:
        for minor in range(lowest.minor, tested[-1].minor + 1):
            if (lowest.major, minor) not in minors:
                problems.append(f"transformers {lowest.major}.{minor} lies inside the range but was not tested")
    requirements = transformers_requirements(pyproject)
    if "dependencies" not in requirements:
        problems.append("pyproject.toml declares no transformers dependency")
    for where, requirement in requirements.items():
        lower, upper, others = _bounds(requirement)
        expected_lower = Version(SERVING_MIN_TRANSFORMERS) if where == "extra serving" else lowest
        if others:
            problems.append(f"{where}: `{requirement}` has specifiers other than >= and < ({others})")
        if lower != expected_lower:
            problems.append(
                f"{where}: `{requirement}` must start at {expected_lower} (the first tested release"
                + (" with the server vlmprep extends" if where == "extra serving" else "")
                + ")"
            )
        if upper != highest:
            problems.append(
                f"{where}: `{requirement}` must end before {highest} (the minor release after the newest tested one)"
            )
    return problems


def main(argv: list[str]) -> int:
    if argv == ["--ends"]:
        print(TESTED_TRANSFORMERS[0], TESTED_TRANSFORMERS[-1])
        return 0
    problems = range_problems()
    if problems:
        print("transformers range in pyproject.toml is not the tested range:")
        for problem in problems:
            print(f"  - {problem}")
        return 1
    print(
        f"transformers range >={MIN_TRANSFORMERS},<{MAX_TRANSFORMERS_EXCLUSIVE} is the tested range "
        f"({', '.join(TESTED_TRANSFORMERS)}); the server's starts at {SERVING_MIN_TRANSFORMERS}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
