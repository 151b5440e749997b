"""Running a test's work on several threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_in_threads(work: Callable[[int], None], count: int) -> None:
    """Run `work(0)`, ..., `work(count - 1)` on `count` threads at once; re-raise the first error any of them hit.

    An assertion failing in a thread would only be printed by `threading`; collecting it makes the test fail.
    """
    errors: list[BaseException] = []

    def guarded(index: int) -> None:
        try:
            work(index)
        except Exception as error:  # noqa: BLE001 - raised again in the calling thread
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
