"""Check that every private transformers method vlmprep's mixin overrides or calls exists with the parameters it
expects. Exit 1 naming the installed transformers version when not.

Usage: python utils/check_upstream_hooks.py
"""

import sys

import transformers

from vlmprep.utils._compat import REQUIRED_GENERATION_HOOKS, missing_generation_hooks


def main() -> int:
    problems = missing_generation_hooks()
    if problems:
        print(f"transformers {transformers.__version__}: generation hooks missing or changed:")
        for problem in problems:
            print(f"  - {problem}")
        return 1
    print(f"transformers {transformers.__version__}: all {len(REQUIRED_GENERATION_HOOKS)} generation hooks present.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
