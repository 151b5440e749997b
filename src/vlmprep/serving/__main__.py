"""`python -m vlmprep.serving ...`: `vlmprep serve ...` without the `vlmprep` CLI."""

import sys

from .command import main

if __name__ == "__main__":  # importing the module (tools that walk the package do) starts nothing
    sys.exit(main())
