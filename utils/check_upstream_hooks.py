"""Check that every private transformers method vlmprep overrides or calls exists with the parameters it expects:
the generation hooks of the mixin, and the continuous-batching engine and server classes that `vlmprep.batching` and
`vlmprep serve` extend (methods, parameters and the private attributes they read); and that the upstream lines vlmprep
copies (the static cache sizing `_new_cache` repeats) are unchanged; and that every private transformers name a family
or layout calls, overrides or reads is listed (`vlmprep/utils/_family_upstream.py`) and still upstream. Exit 1 naming the installed transformers version
when not.

Usage: python utils/check_upstream_hooks.py
"""

import sys

import transformers

from vlmprep.utils._compat import (
    COPIED_UPSTREAM_SOURCE,
    REQUIRED_GENERATION_HOOKS,
    changed_copied_sources,
    missing_generation_hooks,
    serving_unsupported_message,
)
from vlmprep.utils._engine_compat import ENGINE_ATTRIBUTES, ENGINE_METHODS, missing_engine_hooks
from vlmprep.utils._family_upstream import FAMILY_PRIVATE_UPSTREAM, missing_family_upstream, unlisted_private_names


def main() -> int:
    problems = missing_generation_hooks() + changed_copied_sources() + missing_engine_hooks()
    problems += unlisted_private_names() + missing_family_upstream()
    if problems:
        print(f"transformers {transformers.__version__}: hooks missing or changed:")
        for problem in problems:
            print(f"  - {problem}")
        return 1
    methods = sum(len(names) for names in ENGINE_METHODS.values())
    attributes = sum(len(names) for names in ENGINE_ATTRIBUTES.values())
    served = (
        f"engine and server: {methods} methods, {attributes} attributes present."
        if serving_unsupported_message() is None
        else f"engine: present; server: not checked (`vlmprep serve` refuses transformers {transformers.__version__})."
    )
    print(
        f"transformers {transformers.__version__}: all {len(REQUIRED_GENERATION_HOOKS)} generation hooks present; "
        f"copied upstream code unchanged in {len(COPIED_UPSTREAM_SOURCE)} methods; the families' "
        f"{len(FAMILY_PRIVATE_UPSTREAM)} private upstream names listed and present; {served}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
