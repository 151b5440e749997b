"""No test file holds a hand-typed list of families: every family a test selects comes from the registry's traits
(`support.traits`), and what differs per family is stated in its case (`support/families/cases_*.py`)."""

from __future__ import annotations

import ast
import pathlib

import pytest

from support.cases import CASES_FOR_NEWER_TRANSFORMERS
from vlmprep.models.registry import FAMILY_SPECS

TESTS = pathlib.Path(__file__).resolve().parents[1]
# Where family names belong: the cases, and the traits that select by them
ALLOWED = (TESTS / "support" / "families", TESTS / "support" / "traits.py")
MODEL_TYPES = frozenset(FAMILY_SPECS) | frozenset(CASES_FOR_NEWER_TRANSFORMERS)


def _test_files() -> list[pathlib.Path]:
    return sorted(
        path
        for path in TESTS.rglob("*.py")
        if not any(path == allowed or allowed in path.parents for allowed in ALLOWED)
    )


def _model_types_in(node: ast.AST) -> list[str]:
    """The registered model types among a literal's elements (a dict's keys)."""
    elements = node.keys if isinstance(node, ast.Dict) else node.elts
    return [e.value for e in elements if isinstance(e, ast.Constant) and e.value in MODEL_TYPES]


def _family_lists(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)) and len(_model_types_in(node)) >= 2:
            found.append(f"line {node.lineno}: a literal of families {_model_types_in(node)}")
    for node in getattr(tree, "body", []):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        value = getattr(node, "value", None)
        literal = (ast.List, ast.Tuple, ast.Set, ast.Dict)
        for target in targets:
            if isinstance(target, ast.Name) and target.id.endswith("FAMILIES") and isinstance(value, literal):
                found.append(f"line {node.lineno}: {target.id} is assigned a literal, not a selection by traits")
    return found


@pytest.mark.parametrize("path", _test_files(), ids=lambda path: str(path.relative_to(TESTS)))
def test_no_hand_typed_family_list(path):
    assert _family_lists(ast.parse(path.read_text(), str(path))) == []


def test_the_guard_sees_a_family_list():
    tree = ast.parse('FAMILIES = ["gemma3", "llava"]\nother = {"qwen2_vl": 1, "glm4v": 2}\n')
    assert len(_family_lists(tree)) == 3
