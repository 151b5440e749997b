"""The private transformers names vlmprep's families and layouts use beyond the generation hooks, and their check.

A family that calls a private upstream method (an audio tower's output-length arithmetic), overrides one, or reads a
private attribute depends on it as much as the mixin depends on its hooks: a release that renames it breaks that
family. Every such name is listed here; `utils/check_upstream_hooks.py` finds the private names the family and layout
modules use (`private_names_used`) and fails on one that is not listed, and checks that each listed one is still
upstream with the parameters vlmprep passes (`missing_family_upstream`).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib

from ._compat import REQUIRED_GENERATION_HOOKS, method_problems

# "module:qualified name" -> the parameters vlmprep passes (a property or attribute: `()`).
FAMILY_PRIVATE_UPSTREAM: dict[str, tuple[str, ...]] = {
    # The Qwen2.5-Omni thinker's audio tower: a clip's placeholders from its frames (`layouts/patch_grid_audio.py`)
    "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni:Qwen2_5OmniAudioEncoder._get_feat_extract_output_lengths": (
        "input_lengths",
    ),
    # The Qwen3-Omni thinker's: a module function with the tower's window (`models/qwen3_omni_moe.py`)
    "transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe:_get_feat_extract_output_lengths": (
        "input_lengths",
        "n_window",
    ),
    # Nemotron-H Omni's audio tower (Parakeet's encoder): a clip's placeholders from its frames
    # (`models/nemotron_h_omni.py`)
    "transformers.models.parakeet.modeling_parakeet:ParakeetEncoder._get_subsampling_output_length": (
        "input_lengths",
    ),
    # Unlimited-OCR's pinned prompt length when the caller passes no mask (`models/unlimited_ocr.py`)
    "transformers.models.unlimited_ocr.modeling_unlimited_ocr:UnlimitedOcrGenerationMixin._get_prefill_length": (
        "input_ids",
        "model_kwargs",
    ),
    # The attention a config selected (MiniMax-M3-VL refuses continuous batching without a masked attention)
    "transformers.configuration_utils:PreTrainedConfig._attn_implementation": (),
    # Whether `set_attn_implementation` / `set_experts_implementation` may switch a class: every drop-in asks its
    # transformers class (`models/base.py`)
    "transformers.modeling_utils:PreTrainedModel._can_set_attn_implementation": (),
    "transformers.modeling_utils:PreTrainedModel._can_set_experts_implementation": (),
    # `vlmprep.AutoModelForImageTextToText.from_config` builds a drop-in as transformers' auto class does
    "transformers.modeling_utils:PreTrainedModel._from_config": ("config",),
}

MODELS_DIR = pathlib.Path(__file__).resolve().parents[1] / "models"


def private_names_used(directory: pathlib.Path = MODELS_DIR) -> dict[str, list[str]]:
    """The private names the modules under `directory` read from transformers: attributes (`x._name`) that vlmprep
    defines nowhere, methods overriding a private upstream method, and private names imported from transformers.

    Args:
        directory (`pathlib.Path`, *optional*): the modules to read (default: `vlmprep/models`, families and layouts).

    Returns:
        `dict[str, list[str]]`: name -> the files using it.
    """
    package = directory.parent
    trees = {path: ast.parse(path.read_text()) for path in sorted(package.rglob("*.py"))}
    ours = {
        name
        for tree in trees.values()
        for node in ast.walk(tree)
        for name in _defined_names(node)
        if name.startswith("_")
    }
    upstream_hooks = set(REQUIRED_GENERATION_HOOKS)
    used: dict[str, list[str]] = {}
    for path, tree in trees.items():
        if directory not in path.parents:
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in ours:
                names.append(node.attr)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformers"):
                names += [alias.name for alias in node.names if _private(alias.name)]
            elif isinstance(node, ast.FunctionDef) and node.name in upstream_hooks:
                continue  # the generation hooks: checked with the mixin's
            for name in names:
                used.setdefault(name, []).append(str(path.relative_to(package.parent)))
    for name in _private_overrides():
        used.setdefault(name, []).append("(an override in a drop-in class)")
    return used


def unlisted_private_names() -> list[str]:
    """Descriptions of the private upstream names the families use that `FAMILY_PRIVATE_UPSTREAM` does not list."""
    listed = {key.rsplit(".", 1)[-1].rsplit(":", 1)[-1] for key in FAMILY_PRIVATE_UPSTREAM}
    return [
        f"{name} (used by {', '.join(sorted(set(files)))}) is a private transformers name not listed in "
        "vlmprep/utils/_family_upstream.py FAMILY_PRIVATE_UPSTREAM: list it with the parameters passed"
        for name, files in sorted(private_names_used().items())
        if name not in listed
    ]


def missing_family_upstream() -> list[str]:
    """Descriptions of the listed private names the installed transformers lacks (a family module transformers does
    not have at all, newer than it, is skipped).

    Returns:
        `list[str]`
    """
    problems = []
    for key, parameters in FAMILY_PRIVATE_UPSTREAM.items():
        module_name, qualified = key.split(":")
        try:
            value = importlib.import_module(module_name)
        except ImportError:
            continue
        for part in qualified.split("."):
            value = inspect.getattr_static(value, part, None) if value is not None else None
        if value is None:
            problems.append(f"{key} is missing")
        elif callable(value) or isinstance(value, (staticmethod, classmethod)):
            function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            problems += method_problems(key, function, parameters)
    return problems


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_names(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [target.id if isinstance(target, ast.Name) else getattr(target, "attr", "") for target in node.targets]
    if isinstance(node, ast.AnnAssign):
        return [node.target.id if isinstance(node.target, ast.Name) else getattr(node.target, "attr", "")]
    if isinstance(node, (ast.arg,)):
        return [node.arg]
    return []


def _private_overrides() -> set[str]:
    # Private methods a drop-in class defines that its transformers class also has (other than the mixin's hooks)
    from ..models.registry import FAMILY_SPECS

    found = set()
    for spec in FAMILY_SPECS.values():
        if spec.drop_in is None:
            continue
        cls = spec.drop_in_class()
        upstream = next(base for base in cls.__mro__ if base.__module__.startswith("transformers."))
        for klass in cls.__mro__:
            if not klass.__module__.startswith("vlmprep.models"):
                continue
            found.update(
                name
                for name in vars(klass)
                if _private(name) and name not in REQUIRED_GENERATION_HOOKS and hasattr(upstream, name)
            )
    return found
