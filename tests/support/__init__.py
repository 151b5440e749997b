"""What the tests share: the family-case registry and its case modules (`registry`, `cases`, `families/`), the
reference computations (`references`), prompt builders of the case modules, Hypothesis strategies and thread helpers.

Test files import from here (`from support.references import Prompt`); `tests/` is on `sys.path` through its
`conftest.py`.
"""
