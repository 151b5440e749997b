"""The documentation's examples run (the migration guide's included), and every public object is documented."""

from __future__ import annotations

import doctest
import pathlib

import pytest

import vlmprep

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("page", sorted(path.name for path in DOCS.glob("*.md")))
def test_documentation_examples_run(page):
    result = doctest.testfile(str(DOCS / page), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{page}: {result.failed} failing example(s)"


def test_every_public_object_is_documented_and_referenced():
    reference = (DOCS / "reference.md").read_text()
    for name in vlmprep.__all__:
        if name.startswith("__"):
            continue
        assert (getattr(vlmprep, name).__doc__ or "").strip(), f"vlmprep.{name} has no docstring"
        assert f"`{name}`" in reference, f"vlmprep.{name} is missing from docs/reference.md"
