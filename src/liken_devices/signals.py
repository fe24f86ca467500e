"""Waiting in a program's main thread so that a stop signal always ends the wait.

The kernel hands a process's signal to any one of its threads that does not block it, and
CPython runs the Python handler only in the main thread, the next time that thread runs Python
code. A main thread asleep in an untimed wait on a lock (``threading.Event.wait()``) while
grpcio's or the endpoint's thread took the pod's SIGTERM would sleep on until the kubelet's
SIGKILL. :func:`wait` sleeps in slices, so a pending handler runs within one. (The node agent's
loop sleeps in ``select`` and is woken by the signal's byte on its pipe instead:
``signal.set_wakeup_fd``, in :mod:`.agent.runner`.)
"""

from __future__ import annotations

import threading
import time

SLICE = 1.0  # seconds: the longest a stop signal waits for the main thread


def wait(event: threading.Event, timeout: float | None = None) -> bool:
    """``event.wait(timeout)``, in slices of at most :data:`SLICE` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = SLICE if deadline is None else min(SLICE, deadline - time.monotonic())
        if step <= 0:
            return event.is_set()
        if event.wait(step):
            return True
