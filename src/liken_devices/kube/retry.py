"""Backoff and outage logging for talking to an API server that may be down, slow or busy.

Issue 4: an API server that is down, slow or answers 409/429/5xx is retried with backoff and
logged once per outage; the slice converges when it returns. A node must not flood the log
(one line per failed retry would, over a long outage) nor the server (retrying at once would).
"""

from __future__ import annotations

import logging
import time
from typing import Protocol


class ApiMetrics(Protocol):
    """What the API side reports to the agent's metrics (see ``agent.metrics``)."""

    def api_error(self, op: str, code: int | None) -> None: ...

    def published(self, devices: int, generation: int) -> None: ...


class NullMetrics:
    def api_error(self, op: str, code: int | None) -> None:
        pass

    def published(self, devices: int, generation: int) -> None:
        pass


class Backoff:
    """Exponential delays: ``initial``, doubling, at most ``maximum``; reset on success."""

    def __init__(self, initial: float = 0.5, maximum: float = 30.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def next(self, at_least: float = 0.0) -> float:
        delay = max(self._next, at_least)
        self._next = min(self._next * 2, self.maximum)
        return min(delay, max(self.maximum, at_least))

    def reset(self) -> None:
        self._next = self.initial


class OutageLog:
    """Logs the first failure of an outage and the recovery, and nothing in between."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self._log = log
        self._what = what
        self._since: float | None = None
        self.failures = 0

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, error: str) -> None:
        self.failures += 1
        if self._since is None:
            self._since = time.monotonic()
            self._log.warning("%s: %s; retrying with backoff", self._what, error)
        else:
            self._log.debug("%s: still failing: %s", self._what, error)

    def recovered(self, detail: str = "") -> None:
        if self._since is None:
            return
        took = time.monotonic() - self._since
        self._log.warning("%s: recovered after %.1f s and %d failed attempts%s", self._what,
                          took, self.failures, f"; {detail}" if detail else "")
        self._since = None
        self.failures = 0
