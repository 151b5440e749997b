"""The `vlmprep` logger, controlled by transformers' verbosity.

`transformers.utils.logging.set_verbosity_info()` (or `TRANSFORMERS_VERBOSITY=info`) is how users of transformers
choose how much a library says; vlmprep's messages follow the same switch instead of a second one. transformers sets
the level of its own `transformers` logger only, so each vlmprep logger carries a filter that compares a record with
transformers' current verbosity when the record is made. The records go to one stderr handler on the `vlmprep`
logger, which does not propagate (as transformers' own logger does), so a message is printed once.

Example:

```python
>>> from transformers.utils import logging as hf_logging
>>> from vlmprep.utils.logging import get_logger
>>> logger = get_logger("vlmprep.example")
>>> logger.name, hf_logging.get_verbosity() == hf_logging.WARNING
('vlmprep.example', True)

```
"""

from __future__ import annotations

import logging
import sys
import threading

from transformers.utils import logging as hf_logging

__all__ = ["LIBRARY_LOGGER_NAME", "get_logger"]

LIBRARY_LOGGER_NAME = "vlmprep"

_lock = threading.Lock()
_configured = False


class _TransformersVerbosityFilter(logging.Filter):
    """Lets a record through when its level reaches transformers' verbosity, read at the time of the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= hf_logging.get_verbosity()


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to `sys.stderr` as it is when a record is emitted (a redirect or pytest's capture), not at import."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass  # always the current `sys.stderr`


_VERBOSITY_FILTER = _TransformersVerbosityFilter()


def _configure_library_logger() -> None:
    global _configured
    with _lock:
        if _configured:
            return
        hf_logging.get_logger("transformers")  # transformers reads TRANSFORMERS_VERBOSITY when it first configures
        library_logger = logging.getLogger(LIBRARY_LOGGER_NAME)
        library_logger.addHandler(_CurrentStderrHandler())
        # The filters decide; the level only has to let every record be made.
        library_logger.setLevel(logging.DEBUG)
        library_logger.addFilter(_VERBOSITY_FILTER)
        library_logger.propagate = False
        _configured = True


def get_logger(name: str | None = None) -> logging.Logger:
    """A logger under `vlmprep` whose messages show as transformers' verbosity allows.

    Args:
        name (`str`, *optional*): the logger's name, usually a module's `__name__` (`vlmprep.<module>`); a name
            outside the `vlmprep` hierarchy is put under it. Defaults to the `vlmprep` logger itself.

    Returns:
        `logging.Logger`: use it as any logger (`logger.warning(...)`, `logger.info(...)`); the records show when
        their level reaches `transformers.utils.logging.get_verbosity()`.
    """
    _configure_library_logger()
    if name is None or name == LIBRARY_LOGGER_NAME:
        return logging.getLogger(LIBRARY_LOGGER_NAME)
    if not name.startswith(LIBRARY_LOGGER_NAME + "."):
        name = f"{LIBRARY_LOGGER_NAME}.{name}"
    logger = logging.getLogger(name)
    if _VERBOSITY_FILTER not in logger.filters:
        logger.addFilter(_VERBOSITY_FILTER)  # a logger's filters see only the records made on that logger
    return logger
