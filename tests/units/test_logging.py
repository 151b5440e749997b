"""The `vlmprep` logger follows transformers' verbosity: `set_verbosity_*` and `TRANSFORMERS_VERBOSITY`."""

from __future__ import annotations

import logging
import os
import pathlib
import subprocess
import sys

import pytest
from transformers.utils import logging as hf_logging

from vlmprep.utils.logging import get_logger

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def records():
    handler = _Records()
    library_logger = get_logger()
    library_logger.addHandler(handler)
    verbosity = hf_logging.get_verbosity()
    try:
        yield handler.messages
    finally:
        library_logger.removeHandler(handler)
        hf_logging.set_verbosity(verbosity)


def test_logger_names_are_under_vlmprep():
    assert get_logger().name == "vlmprep"
    assert get_logger("vlmprep.models.auto").name == "vlmprep.models.auto"
    assert get_logger("my_extension").name == "vlmprep.my_extension"


def test_set_verbosity_controls_vlmprep_messages(records):
    logger = get_logger("vlmprep.tests")
    hf_logging.set_verbosity_warning()
    logger.info("hidden info")
    logger.warning("shown warning")
    hf_logging.set_verbosity_info()
    logger.info("shown info")
    logger.debug("hidden debug")
    hf_logging.set_verbosity_error()
    logger.warning("hidden warning")
    assert records == ["shown warning", "shown info"]


def test_library_logger_prints_once_to_current_stderr(records, capsys):
    hf_logging.set_verbosity_warning()
    get_logger("vlmprep.tests").warning("printed once")
    assert capsys.readouterr().err == "printed once\n"


def test_transformers_verbosity_environment_variable():
    # A fresh interpreter: transformers reads the variable once, when its logging is first configured.
    code = (
        "from vlmprep.utils.logging import get_logger\n"
        "logger = get_logger('vlmprep.tests')\n"
        "logger.info('info shown')\n"
        "logger.debug('debug hidden')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC), "TRANSFORMERS_VERBOSITY": "info"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert "info shown" in result.stderr and "debug hidden" not in result.stderr
