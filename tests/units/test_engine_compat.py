"""The check of what continuous batching and `vlmprep serve` need from transformers' private engine and server."""

import pytest

from vlmprep.utils import _engine_compat
from vlmprep.utils._engine_compat import missing_engine_hooks

MANAGER = "transformers.generation.continuous_batching.continuous_api:ContinuousBatchingManager"
REQUEST = "transformers.generation.continuous_batching.requests:RequestState"


def test_installed_transformers_has_every_engine_hook():
    assert missing_engine_hooks() == []


@pytest.mark.parametrize(
    "table, target, entry, expected",
    [
        ("ENGINE_METHODS", MANAGER, {"_renamed_step": ()}, "ContinuousBatchingManager._renamed_step is missing"),
        (
            "ENGINE_METHODS",
            MANAGER,
            {"_generation_loop_body": ("batch_processor", "warming_up")},
            "lacks parameter(s) ['warming_up']",
        ),
        ("ENGINE_METHODS", "transformers.generation:NoSuchManager", {}, "NoSuchManager is missing"),
        (
            "ENGINE_ATTRIBUTES",
            MANAGER,
            ("_request_lock", "_renamed_lock"),
            "no longer sets attribute(s) ['_renamed_lock']",
        ),
        ("ENGINE_ATTRIBUTES", REQUEST, ("position_offset", "renamed_offset"), "['renamed_offset']"),
    ],
)
def test_a_renamed_hook_is_reported(monkeypatch, table, target, entry, expected):
    patched = dict(getattr(_engine_compat, table))
    patched[target] = {**patched.get(target, {}), **entry} if isinstance(entry, dict) else entry
    monkeypatch.setattr(_engine_compat, table, patched)
    problems = missing_engine_hooks()
    assert len(problems) == 1 and expected in problems[0], problems


def test_the_engine_is_refused_when_a_hook_vlmprep_extends_is_missing(monkeypatch):
    import vlmprep
    from vlmprep.batching import support
    from vlmprep.testing import tiny_llava_config

    model = vlmprep.LlavaForConditionalGeneration(tiny_llava_config()).eval()
    support.check_batching_support(model)  # the installed transformers has every hook
    renamed = (f"{MANAGER}._generation_step is missing",)
    monkeypatch.setattr(support, "engine_hook_problems", lambda: renamed)
    with pytest.raises(ValueError, match=r"engine lacks what vlmprep extends: .*_generation_step is missing"):
        model.generate_batch([[4, 5, 6]], progress_bar=False)


def test_the_engine_check_leaves_out_the_server_when_asked(monkeypatch):
    patched = {**_engine_compat.ENGINE_METHODS, "transformers.cli.no_such_module:Handler": {}}
    monkeypatch.setattr(_engine_compat, "ENGINE_METHODS", patched)
    assert missing_engine_hooks(include_server=False) == []
    assert "transformers.cli.no_such_module:Handler is missing" in missing_engine_hooks(include_server=True)


def test_the_server_is_checked_exactly_where_vlmprep_serve_runs(monkeypatch):
    patched = {**_engine_compat.ENGINE_METHODS, "transformers.cli.no_such_module:Handler": {}}
    monkeypatch.setattr(_engine_compat, "ENGINE_METHODS", patched)
    monkeypatch.setattr(_engine_compat, "serving_unsupported_message", lambda: None)
    assert "transformers.cli.no_such_module:Handler is missing" in missing_engine_hooks()
    monkeypatch.setattr(_engine_compat, "serving_unsupported_message", lambda: "refused")
    assert "transformers.cli.no_such_module:Handler is missing" not in missing_engine_hooks()
