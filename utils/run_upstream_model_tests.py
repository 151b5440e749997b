"""Run transformers' own model tests twice, with the plain classes and with vlmprep's drop-ins swapped in, and print
the tests that pass plain but fail swapped (the "faithful" bar: docs/guarantees.md).

The tests are not installed with transformers. Build a tree holding `tests/` of the transformers repository at (or
near) the installed version: the PyPI sdist (`pip download transformers==<version> --no-binary :all: --no-deps`) ships
`tests/test_modeling_common.py`, `tests/test_configuration_common.py` and the other common mixins; take
`tests/__init__.py`, `tests/generation/`, `tests/exporters/`, `tests/utils/test_configuration_utils.py`,
`tests/causal_lm_tester.py`, `tests/vlm_tester.py` and `tests/models/<family>/test_modeling_<family>.py` from a
checkout of the repository (any fork near the version will do: the whole repository is too big to fetch here, a fork
is not), with `tests/utils/tiny_model_summary.json`, `tests/multimodal_tester.py` and a `src/transformers` link to the
installed package (`tests/test_pipeline_mixin.py` imports it from there). Without `httpx`, keep only
`config_common_kwargs` of `tests/utils/test_configuration_utils.py`; `utils/fetch_hub_objects_for_ci.py` may be a stub
whose `url_to_local_path` returns its argument. Version skew between that tree and the installed transformers is what the plain run
measures: only the difference between the two runs is reported.

Usage (from the vlmprep checkout, one family at a time, one pytest at a time):
    PYTHONPATH=src python utils/run_upstream_model_tests.py /tmp/hf_tests ernie4_5_vl_moe [glm_ocr ...]

This file is also the pytest plugin that swaps (`-p run_upstream_model_tests` with `VLMPREP_SWAP=1`): before any test
module is imported, every transformers class that has a drop-in is replaced by it in `transformers` and in its
`transformers.models.<x>.modeling_<x>` module, so `from transformers import X` in the tests gets the drop-in.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

SWAP_ENV = "VLMPREP_SWAP"


def swap_in_drop_ins() -> list[str]:
    """Replace each transformers class that has a vlmprep drop-in by the drop-in, where transformers exports it.

    Returns:
        `list[str]`: the swapped class names.
    """
    import transformers
    import transformers.testing_utils  # noqa: F401 - importing it sets transformers' own exports again: first

    from vlmprep.models.registry import load_drop_in_classes

    drop_ins = {drop_in.__name__: drop_in for drop_in in load_drop_in_classes().values()}
    # Resolve every lazy export first: resolving one name can set others of its module on `transformers` again.
    upstream_of = {name: getattr(transformers, name) for name in drop_ins}
    for name, drop_in in drop_ins.items():
        sys.modules[upstream_of[name].__module__].__dict__[name] = drop_in
        setattr(transformers, name, drop_in)
    not_swapped = [name for name, drop_in in drop_ins.items() if getattr(transformers, name) is not drop_in]
    if not_swapped:
        raise RuntimeError(f"transformers still exports its own {not_swapped}")
    return sorted(drop_ins)


def pytest_configure(config) -> None:
    """pytest hook: swap before collection imports the test modules, when `VLMPREP_SWAP=1`."""
    if os.environ.get(SWAP_ENV) == "1":
        print(f"vlmprep: swapped {len(swap_in_drop_ins())} transformers classes for drop-ins", file=sys.stderr)


def pytest_pycollect_makemodule(module_path, parent) -> None:
    """pytest hook: swap again just before a test module is imported (imports in between may have undone it)."""
    if os.environ.get(SWAP_ENV) == "1":
        swap_in_drop_ins()


def passed_tests(junit_xml: pathlib.Path) -> tuple[set[str], dict[str, str]]:
    """The passing test ids of a JUnit report, and the first line of each failure, error or skip reason.

    Args:
        junit_xml (`pathlib.Path`): pytest's `--junitxml` output.

    Returns:
        `tuple[set[str], dict[str, str]]`: passed ids; id of a test that did not pass -> first line of its message.
    """
    passed, failed = set(), {}
    if not junit_xml.exists():
        return passed, failed
    for case in ET.parse(junit_xml).iter("testcase"):
        test_id = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            passed.add(test_id)
        else:
            first_lines = (outcome.get("message") or "").strip().splitlines()
            skipped = "skipped: " if outcome.tag == "skipped" else ""
            failed[test_id] = skipped + (first_lines[0][:300] if first_lines else "")
    return passed, failed


def run_family(tree: pathlib.Path, family: str, swap: bool, timeout: int, out_dir: pathlib.Path) -> pathlib.Path:
    """Run one family's model test file in a subprocess, plain or swapped; returns the JUnit report's path."""
    report = out_dir / f"{family}.{'swapped' if swap else 'plain'}.xml"
    report.unlink(missing_ok=True)
    env = dict(os.environ, **{SWAP_ENV: "1" if swap else "0"})
    utils_dir = str(pathlib.Path(__file__).resolve().parent)
    # The tests run inside the tree: a relative entry (`PYTHONPATH=src`) must keep naming the vlmprep checkout's.
    given = [os.path.abspath(entry) for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    env["PYTHONPATH"] = os.pathsep.join([utils_dir, *given])
    test_file = f"tests/models/{family}/test_modeling_{family}.py"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "run_upstream_model_tests"]
    command += [test_file, f"--junitxml={report}", "-o", "junit_family=xunit1"]
    log = out_dir / f"{family}.{'swapped' if swap else 'plain'}.log"
    with open(log, "w") as log_file:
        try:
            subprocess.run(command, cwd=tree, env=env, stdout=log_file, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"  {family}: {'swapped' if swap else 'plain'} run passed the {timeout}s limit", file=sys.stderr)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=pathlib.Path, help="directory holding transformers' tests/ tree")
    parser.add_argument("families", nargs="+", help="model types, as named under tests/models/")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per test file and run")
    parser.add_argument("--reuse-plain", action="store_true", help="keep a family's earlier plain report if any")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="where reports go (default: <tree>/reports)")
    args = parser.parse_args()
    out_dir = (args.out or args.tree / "reports").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    regressions = 0
    for family in args.families:
        plain_report = out_dir / f"{family}.plain.xml"
        if not (args.reuse_plain and plain_report.exists()):
            run_family(args.tree, family, False, args.timeout, out_dir)
        plain, _ = passed_tests(plain_report)
        swapped, failures = passed_tests(run_family(args.tree, family, True, args.timeout, out_dir))
        lost = sorted(plain - swapped)
        regressions += len(lost)
        print(f"{family}: {len(plain)} pass plain, {len(swapped)} pass swapped, {len(lost)} pass only plain")
        for test_id in lost:
            print(f"  {test_id}: {failures.get(test_id, 'not run (collection error or timeout)')}")
        gained = sorted(swapped - plain)
        if gained:
            print(f"  (pass only swapped: {', '.join(gained)})")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
