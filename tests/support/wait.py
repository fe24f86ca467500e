"""The one way a test waits for something another thread or process does: :func:`wait_until`.

A test that starts an agent, a plugin or a holder process learns what it did by looking again
(a file, the fake API server's store, a process table) until it shows or a deadline passes. Each
wait names what it waits for, so a red test says which step never came, and returns the value
it saw, so the test goes on with the very thing that satisfied it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str | Callable[[], str], *,
               every: float = 0.02) -> T:
    """Call ``predicate`` every ``every`` seconds until it returns something truthy, and return
    that; after ``timeout`` seconds fail with an AssertionError naming ``what`` (a callable
    ``what`` is asked only then, for a message that reads logs or state at that moment)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"waited {timeout:g} s for {said}")
        time.sleep(every)
