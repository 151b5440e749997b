"""`python -m vlmprep.cli`: the `vlmprep` command."""

import sys

from . import main

sys.exit(main())
