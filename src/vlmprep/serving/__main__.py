"""`python -m vlmprep.serving ...`: `vlmprep serve ...` without the `vlmprep` CLI."""

import sys

from .command import main

sys.exit(main())
