"""Check the shape of the source tree: small modules, a thin mixin, documented long functions, no import cycles.

- a module of `src/vlmprep` over 400 lines is a warning, and states why in a comment (`# Over 400 lines: <reason>`):
  a module follows a concept, and the cap asks whether it holds two, not for a split by line count;
- `generation/mixin.py`'s `VisionPrepGenerationMixin` only overrides upstream generation steps (each of its methods
  is a `GenerationMixin` / `PreTrainedModel` method), each short (at most 40 lines of code): the work they delegate
  lives in its own modules;
- no function or method over 60 lines lacks a docstring (a long function says what it does);
- no cycle among the modules' imports, counting imports inside functions and under `TYPE_CHECKING`: an import
  inside a function is still an import, so it cannot hide a cycle (imports point down: models -> batching ->
  generation -> cache).

Family files importing each other are checked by `utils/check_exports.py`.

Usage: python utils/check_layout.py
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "vlmprep"
MAX_LINES = 400
LONG_MODULE_REASON = re.compile(r"^# Over 400 lines: \S", re.M)
MAX_MIXIN_METHOD_CODE_LINES = 40
MAX_UNDOCUMENTED_FUNCTION_LINES = 60


def module_paths() -> dict[str, pathlib.Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("vlmprep", *path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The package modules `name` imports anywhere: at top level, inside functions and under `TYPE_CHECKING`."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            candidates = [target, *(f"{target}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        imported.update(candidate for candidate in candidates if candidate in modules and candidate != name)
    return imported


def undocumented_long_functions(path: pathlib.Path) -> list[str]:
    """`path:line name (N lines)` for each function or method over the limit without a docstring."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lines = node.end_lineno - node.lineno + 1
        if lines > MAX_UNDOCUMENTED_FUNCTION_LINES and ast.get_docstring(node) is None:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def mixin_problems(path: pathlib.Path) -> list[str]:
    """What is wrong with the generation mixin: a method that overrides no upstream generation step, or a long one."""
    from transformers import GenerationMixin, PreTrainedModel

    tree = ast.parse(path.read_text())
    mixin = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "VisionPrepGenerationMixin")
    problems = []
    for method in [node for node in mixin.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        where = f"{path.relative_to(ROOT)}:{method.lineno} {method.name}"
        if not (hasattr(GenerationMixin, method.name) or hasattr(PreTrainedModel, method.name)):
            problems.append(
                f"{where} overrides no upstream generation step: the mixin holds the overrides only; move it to the "
                "module doing that work (a family hook belongs to `FamilyHooks`)"
            )
        first = method.body[1] if ast.get_docstring(method) is not None and len(method.body) > 1 else method.body[0]
        code_lines = method.end_lineno - first.lineno + 1
        if code_lines > MAX_MIXIN_METHOD_CODE_LINES:
            problems.append(
                f"{where} has {code_lines} lines of code (at most {MAX_MIXIN_METHOD_CODE_LINES}): an override "
                "delegates the work it hooks in to its own module"
            )
    return problems


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def main() -> int:
    modules = module_paths()
    problems = []
    warnings = []
    for path in modules.values():
        text = path.read_text()
        lines = len(text.splitlines())
        if lines <= MAX_LINES:
            continue
        reason = LONG_MODULE_REASON.search(text)
        if reason is None:
            problems.append(
                f"{path.relative_to(ROOT)} has {lines} lines (over {MAX_LINES}) and says not why: split it by "
                "concept, or state in a comment `# Over 400 lines: <why it is one concept>`"
            )
        else:
            line = text[reason.start() :].splitlines()[0]
            warnings.append(f"{path.relative_to(ROOT)} has {lines} lines: {line.removeprefix('# ')}")
    mixin = PACKAGE / "generation" / "mixin.py"
    problems += mixin_problems(mixin)
    problems += [
        f"{function} has no docstring: a function over {MAX_UNDOCUMENTED_FUNCTION_LINES} lines says what it does"
        for path in modules.values()
        for function in undocumented_long_functions(path)
    ]
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    for cycle in import_cycles(graph):
        problems.append(
            f"import cycle among {', '.join(cycle)} (imports inside functions count): make the imports point down, "
            "moving what both sides need to the lower module"
        )
    for warning in warnings:
        print(f"check-layout: warning: {warning}")
    for problem in problems:
        print(f"check-layout: {problem}")
    if not problems:
        print(
            f"check-layout: {len(modules)} modules, {len(warnings)} over {MAX_LINES} lines with a reason; the mixin's "
            "methods override upstream generation steps, each short; long functions documented; no import cycle."
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
