"""The import-time check of the generation hooks vlmprep's code needs, and the check of the upstream code it copies."""

from __future__ import annotations

import pytest

from vlmprep.utils import _compat


def test_the_installed_transformers_has_every_hook_and_copied_line():
    assert _compat.missing_generation_hooks() == []
    assert _compat.changed_copied_sources() == []


def test_import_names_a_missing_hook(monkeypatch):
    monkeypatch.setattr(_compat, "REQUIRED_GENERATION_HOOKS", {"_no_such_hook": ("model_kwargs",)})
    with pytest.raises(ImportError, match=r"GenerationMixin\._no_such_hook is missing"):
        _compat.check_transformers_version()


def test_a_changed_upstream_line_names_the_copy_to_follow(monkeypatch):
    monkeypatch.setattr(_compat, "COPIED_UPSTREAM_SOURCE", {"generate": ("max_cache_length = 12345",)})
    problems = _compat.changed_copied_sources()
    assert problems == [
        "GenerationMixin.generate no longer has `max_cache_length = 12345` (generation/prefix.py `_new_cache` copies it)"
    ]
