"""Write `docs/families.md`: every image-text-to-text model type of transformers and what vlmprep does with it.

For each model type of `MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES` the table states the transformers class and what
the registry (`vlmprep.models.registry.FAMILY_SPECS`) says of it: its status, the vlmprep drop-in class it loads and
its layout, or what stands in the way of one today, and whether `vlmprep.text_only` loads its text decoder
alone. From the tests it reads only what they
alone know, from `tests/support/registry.py`: the conformance scenarios the test files declare (`@scenario`) and the ones
each drop-in's case skips, with their reasons (`FAMILY_CASES`).

The document is the view of the newest transformers release the registry names (the highest `since` of
`ALL_FAMILY_SPECS`: model types a newer supported release added), so it lists the types of every supported release.
It is written with that release installed. Under an older supported release, which lacks those types
(`NEWER_FAMILY_SPECS`), `--check` compares what that release can see: the document without the newer types' rows,
sections and layout entries against the one it renders itself, leaving out the lines that state the release and the
counts; and it checks that each newer type still has its row.

Usage:
    python utils/families_table.py          # rewrite docs/families.md (with the newest release the registry names)
    python utils/families_table.py --check  # exit 1 when docs/families.md is stale
"""

from __future__ import annotations

import argparse
import difflib
import pathlib
import re
import sys
import types

import transformers
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

from vlmprep.models import DROP_IN_CLASSES
from vlmprep.models.layouts import all_layouts, layout_of
from vlmprep.models.registry import FAMILY_SPECS, NEWER_FAMILY_SPECS, NOT_ADAPTED_REASONS

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS_DIR = REPO_ROOT / "tests"
DOC_PATH = REPO_ROOT / "docs" / "families.md"
NOT_ADAPTED = "transformers class (not adapted)"


def _test_registry() -> types.ModuleType:
    """`tests/support/registry.py`, imported as the tests import it (`tests/` on `sys.path`, as its conftest puts it)."""
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))
    from support import registry

    return registry


def load_family_cases() -> dict:
    """`FAMILY_CASES` of `tests/support/registry.py`: model type -> the conformance suite's `FamilyCase`."""
    return dict(_test_registry().FAMILY_CASES)


def load_scenarios() -> list:
    """The conformance scenarios the test files declare (`@scenario` in `tests/scenarios/`), sorted by name.

    Returns:
        `list[Scenario]`: each with its name, test file and the families it is limited to (`None`: all).
    """
    return sorted(_test_registry().load_scenarios().values(), key=lambda scenario: scenario.name)


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _class_path(cls: type) -> str:
    return f"`{cls.__module__}.{cls.__qualname__}`"


def build_table(
    mapping: dict[str, str],
    drop_ins: dict[str, type],
    reasons: dict[str, str],
    cases: dict,
    scenarios: list,
    text_only: set[str],
    layouts: dict[str, str] | None = None,
    statuses: dict[str, str] | None = None,
    aliases: dict[str, str] | None = None,
) -> tuple[str, list[str], list[str]]:
    """The markdown of `docs/families.md`, with the problems that make it wrong and the warnings that do not.

    Args:
        mapping (`dict[str, str]`): model type -> transformers class name (the image-text-to-text mapping).
        drop_ins (`dict[str, type]`): model type -> vlmprep drop-in class.
        reasons (`dict[str, str]`): model type -> why it has no drop-in.
        cases (`dict`): model type -> `FamilyCase` of the conformance suite.
        scenarios (`list`): the conformance scenarios (`Scenario`s of `tests/support/registry.py`).
        text_only (`set[str]`): model types whose text decoder loads alone.
        layouts (`dict[str, str]`, *optional*): model type -> the drop-in's layout (a key of `LAYOUTS`).
        statuses (`dict[str, str]`, *optional*): model type -> its status in the registry (`STATUSES`).
        aliases (`dict[str, str]`, *optional*): alias model type -> the model type whose drop-in it loads.

    Returns:
        `tuple[str, list[str], list[str]]`: the document, errors (the table cannot be right), warnings.
    """
    errors, warnings = [], []
    layouts, statuses, aliases = layouts or {}, statuses or {}, aliases or {}
    missing = sorted(set(mapping) - set(drop_ins) - set(reasons))
    if missing:
        errors.append(
            "no drop-in and no reason for: "
            + ", ".join(missing)
            + ". Add each to FAMILY_SPECS in src/vlmprep/models/registry.py (a drop-in, or a one-line reason)."
        )
    stale = sorted(set(reasons) & set(drop_ins))
    if stale:
        warnings.append(
            "these model types have a drop-in now; remove them from NOT_ADAPTED_REASONS: " + ", ".join(stale)
        )
    unknown = sorted(set(reasons) - set(mapping))
    if unknown:
        warnings.append("NOT_ADAPTED_REASONS names model types outside the mapping: " + ", ".join(unknown))
    orphans = sorted(set(cases) - (set(drop_ins) - set(aliases)))
    if orphans:
        warnings.append("FamilyCase registered for model types without a drop-in class: " + ", ".join(orphans))
    known_scenarios = {scenario.name for scenario in scenarios}
    for name, case in sorted(cases.items()):
        for key in sorted(set(case.skip) - known_scenarios):
            warnings.append(f"FamilyCase {name!r} skips {key!r}, which is no conformance scenario")
        for key in sorted(set(getattr(case, "slow", {})) - known_scenarios):
            warnings.append(f"FamilyCase {name!r} marks {key!r} slow, which is no conformance scenario")

    def applies(scenario, family: str) -> bool:
        return scenario.families is None or family in scenario.families

    lines = [
        "# Families",
        "",
        f"<!-- Generated by `python utils/families_table.py` with transformers {transformers.__version__}; do not edit "
        "by hand. -->",
        "",
        f"Every model type of `MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES` in transformers {transformers.__version__} "
        "and what vlmprep does with it. A model type with a drop-in class loads as that class through "
        "`vlmprep.AutoModelForImageTextToText`; any other loads as transformers' own class (with a warning), so "
        "its images are encoded as transformers does. *Status* is the registry's: a drop-in, an alias (another "
        "type's class under its own config type, loading that type's drop-in), a candidate (placeholder-based, "
        "not written yet), not placeholder-based, or blocked upstream; the last column says what stands in the way "
        "today. *Conformance* counts the scenarios of `tests/scenarios/` "
        "the drop-in runs (see [Conformance scenarios per drop-in](#conformance-scenarios-per-drop-in)); "
        "*text-only* says whether `vlmprep.text_only` loads the text decoder alone, without reading "
        "vision weights. *Layout* is how a drop-in's pixel inputs split into items and placeholders (see "
        "[Layouts](#layouts)); all of it is read from `vlmprep.models.registry`.",
        "",
    ]
    adapted = sorted(set(mapping) & set(drop_ins))
    lines += [
        f"{len(adapted)} of {len(mapping)} model types load a drop-in class ({len(set(adapted) & set(aliases))} of "
        "them as aliases); "
        f"{len(set(mapping) & text_only)} load text-only.",
        "",
        "| model type | transformers class | status | vlmprep | layout | conformance | text-only | what stands in the way |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model_type in sorted(mapping):
        text = "yes" if model_type in text_only else "—"
        status = statuses.get(model_type, "drop-in" if model_type in drop_ins else "—")
        if model_type in aliases:
            base = aliases[model_type]
            conformance = f"as `{base}`"
            loads, reason = f"{_class_path(drop_ins[model_type])} (alias of `{base}`)", ""
            layout = f"`{layouts[base]}`" if base in layouts else "—"
        elif model_type in drop_ins:
            case = cases.get(model_type)
            if case is None:
                conformance = "no FamilyCase registered"
            else:
                ran = [s for s in scenarios if applies(s, model_type) and s.name not in case.skip]
                skipped = [s for s in scenarios if applies(s, model_type) and s.name in case.skip]
                conformance = f"{len(ran)} run, {len(skipped)} skipped"
            loads, reason = _class_path(drop_ins[model_type]), ""
            layout = f"`{layouts[model_type]}`" if model_type in layouts else "—"
        else:
            conformance, loads, layout = "—", NOT_ADAPTED, "—"
            reason = _escape(reasons.get(model_type, "**missing reason**"))
        lines.append(
            f"| `{model_type}` | `{mapping[model_type]}` | {status} | {loads} | {layout} | {conformance} | {text} "
            f"| {reason} |"
        )

    outside = sorted(set(drop_ins) - set(mapping))
    if outside:
        lines += ["", "Drop-in classes for model types outside the image-text-to-text mapping:", ""]
        lines += [f"- `{model_type}`: {_class_path(drop_ins[model_type])}" for model_type in outside]

    lines += ["", "## Conformance scenarios per drop-in", ""]
    for model_type in sorted(set(drop_ins) - set(aliases)):
        lines += [f"### `{model_type}`", ""]
        case = cases.get(model_type)
        if case is None:
            lines += [
                "No `FamilyCase` is registered in `tests/support/families/`: the conformance suite does not run it.",
                "",
            ]
            continue
        ran = [s.name for s in scenarios if applies(s, model_type) and s.name not in case.skip]
        skipped = [(s.name, case.skip[s.name]) for s in scenarios if applies(s, model_type) and s.name in case.skip]
        lines.append(f"Runs ({len(ran)}): " + (", ".join(f"`{name}`" for name in ran) or "none") + ".")
        lines.append("")
        if skipped:
            lines.append(f"Skipped ({len(skipped)}):")
            lines.append("")
            lines += [f"- `{name}`: {_escape(reason)}" for name, reason in skipped]
        else:
            lines.append("Skipped: none.")
        lines.append("")
        slow = [(name, getattr(case, "slow", {})[name]) for name in ran if name in getattr(case, "slow", {})]
        if slow:  # run, but by `make test-slow` only
            lines += [f"Run by `make test-slow` only ({len(slow)}):", ""]
            lines += [f"- `{name}`: {_escape(reason)}" for name, reason in slow]
            lines.append("")

    used = sorted(set(layouts.values()))
    layouts_by_name = all_layouts()
    if used:
        lines += ["## Layouts", "", "| layout | items and placeholders | drop-ins |", "|---|---|---|"]
        for name in used:
            families = ", ".join(f"`{model_type}`" for model_type, layout in sorted(layouts.items()) if layout == name)
            lines.append(f"| `{name}` | {_escape(layouts_by_name[name].description)} | {families} |")
        lines.append("")

    lines += ["## Scenarios", "", "| scenario | test file |", "|---|---|"]
    for scenario in scenarios:
        limited = f" (only {', '.join(scenario.families)})" if scenario.families is not None else ""
        lines.append(f"| `{scenario.name}`{limited} | `{scenario.source}` |")
    lines.append("")
    return "\n".join(lines), errors, warnings


def render() -> tuple[str, list[str], list[str]]:
    """The document for the installed transformers and the repository as it is now."""
    return build_table(
        mapping=dict(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES),
        drop_ins=dict(DROP_IN_CLASSES),
        reasons=dict(NOT_ADAPTED_REASONS),
        cases=load_family_cases(),
        scenarios=load_scenarios(),
        text_only={model_type for model_type, spec in FAMILY_SPECS.items() if spec.text_only is not None},
        layouts={
            model_type: layout_of(spec.drop_in_class()).name
            for model_type, spec in FAMILY_SPECS.items()
            if spec.drop_in is not None
        },
        statuses={model_type: spec.status for model_type, spec in FAMILY_SPECS.items()},
        aliases={model_type: spec.alias_of for model_type, spec in FAMILY_SPECS.items() if spec.alias_of is not None},
    )


# The lines of the document that state the release it was written with, and the counts of its types.
_RELEASE_LINES = re.compile(r"<!-- Generated by |Every model type of |\d+ of \d+ model types load ")


def _first_code(line: str) -> str | None:
    # The first `code` span of a line: a table row's model type (or layout), a section's or a list item's model type
    parts = line.split("`")
    return parts[1] if len(parts) > 2 else None


def view_without(document: str, model_types: set[str] | frozenset[str]) -> list[str]:
    """The lines of a families document that do not depend on the release: without the rows, conformance sections and
    layout entries of `model_types`, and without the lines stating the release and the counts.

    Args:
        document (`str`): a document `build_table` wrote.
        model_types (`set[str]`): the model types to leave out (those a newer release added).

    Returns:
        `list[str]`
    """
    lines, section, skipping = [], "", False
    for line in document.splitlines():
        if line.startswith("## "):
            section, skipping = line, False
        elif line.startswith("### "):
            skipping = _first_code(line) in model_types
        if skipping or _RELEASE_LINES.match(line):
            continue
        if section == "## Layouts" and line.startswith("| `"):
            # `| layout | description | drop-ins |`: the drop-ins cell loses the left-out types (and the row, its last)
            head, _, families = line.removesuffix(" |").rpartition(" | ")
            kept = [family for family in families.split(", ") if family.strip("`") not in model_types]
            if kept:
                lines.append(f"{head} | {', '.join(kept)} |")
            continue
        if line.startswith(("| `", "- `")) and _first_code(line) in model_types:
            continue  # a type's table row, or its entry in the list of drop-ins outside the mapping
        lines.append(line)
    return lines


def older_release_problems(current: str, document: str, newer: dict[str, str]) -> list[str]:
    """What is wrong in `current`, the newest release's document, as an older release sees it.

    Args:
        current (`str`): docs/families.md as it is.
        document (`str`): the document the installed (older) release renders.
        newer (`dict[str, str]`): the model types the installed release lacks -> the release that added each.

    Returns:
        `list[str]`: one line per problem, with the diff of the parts both releases see.
    """
    found = []
    rows = {_first_code(line) for line in current.splitlines() if line.startswith("| `")}
    missing = sorted(model_type for model_type in newer if model_type not in rows)
    if missing:
        found.append(f"docs/families.md has no row for {', '.join(missing)}, which newer releases added")
    seen, expected = view_without(current, set(newer)), view_without(document, set(newer))
    if seen != expected:
        diff = difflib.unified_diff(seen, expected, "docs/families.md", "generated", lineterm="", n=0)
        found.append("\n".join(list(diff)[:40]))
        found.append("docs/families.md differs from this release's view in the model types both releases have")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/families.md is stale")
    args = parser.parse_args(argv)

    document, errors, warnings = render()
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if errors:
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        return 1
    current = DOC_PATH.read_text() if DOC_PATH.exists() else ""
    newer = {model_type: spec.since for model_type, spec in NEWER_FAMILY_SPECS.items()}
    if newer:  # the installed release lacks types a newer supported one added: the document is that one's view
        releases = ", ".join(sorted({f"transformers>={since}" for since in newer.values()}))
        if not args.check:
            print(
                f"docs/families.md is the view of the newest release the registry names ({releases}: "
                f"{', '.join(sorted(newer))}); transformers {transformers.__version__} lacks those types. Regenerate it "
                "with that release installed."
            )
            return 1
        found = older_release_problems(current, document, newer)
        for problem in found:
            print(problem)
        if found:
            print(f"docs/families.md is stale: regenerate it with {releases} installed.")
            return 1
        print(
            f"docs/families.md is up to date for transformers {transformers.__version__} (the view of {releases}; "
            f"{', '.join(sorted(newer))} checked there)."
        )
        return 0
    if args.check:
        if current != document:
            diff = difflib.unified_diff(
                current.splitlines(), document.splitlines(), "docs/families.md", "generated", lineterm="", n=0
            )
            print("\n".join(list(diff)[:40]))
            print(
                f"docs/families.md is stale (transformers {transformers.__version__}): run "
                "`python utils/families_table.py` to regenerate it."
            )
            return 1
        print(f"docs/families.md is up to date ({len(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)} model types).")
        return 0
    if current != document:
        DOC_PATH.write_text(document)
        print(f"wrote {DOC_PATH}")
    else:
        print("docs/families.md is up to date.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
