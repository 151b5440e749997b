"""Check the documentation: every public object is documented, and every documentation example still runs.

The one place documentation examples run (CI runs it as `make docs-check`); the test suite does not run them again.

- each name in `vlmprep.__all__` has a docstring and is named in docs/reference.md;
- every `>>>` example in docs/*.md and in the docstrings of `vlmprep`'s modules runs as a doctest.

A drop-in of a model type that the installed transformers lacks (`NEWER_FAMILY_SPECS`: a newer supported release added
it) refuses to import, naming that release: its export and its family module are checked under that release. So are
the server's modules (`vlmprep.serving`), which extend the server of the release `SERVING_MIN_TRANSFORMERS` names.

Usage: python utils/check_docs.py
"""

from __future__ import annotations

import doctest
import importlib
import pathlib
import pkgutil
import sys

import vlmprep
from vlmprep.models.registry import NEWER_FAMILY_SPECS
from vlmprep.utils._compat import serving_unsupported_message

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
# The drop-ins (class names, family modules) the installed transformers lacks: they refuse to import here
NEWER_NAMES = {spec.class_name for spec in NEWER_FAMILY_SPECS.values() if spec.drop_in is not None}
NEWER_MODULES = {f"vlmprep.models.{spec.module}" for spec in NEWER_FAMILY_SPECS.values() if spec.drop_in is not None}


def undocumented_objects() -> list[str]:
    reference = (DOCS / "reference.md").read_text()
    problems = []
    for name in vlmprep.__all__:
        if name.startswith("__") or name in NEWER_NAMES:
            continue
        obj = getattr(vlmprep, name)
        if not (getattr(obj, "__doc__", None) or "").strip():
            problems.append(f"vlmprep.{name} has no docstring")
        if f"`{name}`" not in reference:
            problems.append(f"vlmprep.{name} is not named in docs/reference.md")
    return problems


def failing_doc_examples() -> list[str]:
    problems = []
    for path in sorted(DOCS.glob("*.md")):
        result = doctest.testfile(str(path), module_relative=False, optionflags=FLAGS, verbose=False)
        if result.failed:
            problems.append(f"{path.relative_to(ROOT)}: {result.failed} failing example(s)")
    for module_info in pkgutil.walk_packages(vlmprep.__path__, prefix="vlmprep."):
        if module_info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # importing a `__main__` runs the command line
        if module_info.name in NEWER_MODULES:
            continue
        try:
            module = importlib.import_module(module_info.name)
        except ImportError:
            if module_info.name.startswith("vlmprep.serving.") and serving_unsupported_message() is not None:
                continue  # the server's modules need the release it extends: checked under that release
            raise
        result = doctest.testmod(module, optionflags=FLAGS, verbose=False)
        if result.failed:
            problems.append(f"{module_info.name}: {result.failed} failing docstring example(s)")
    return problems


def main() -> int:
    problems = undocumented_objects() + failing_doc_examples()
    for problem in problems:
        print(f"docs-check: {problem}")
    if not problems:
        print("docs-check: every public object documented, every example runs.")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
