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
