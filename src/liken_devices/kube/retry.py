"""Backoff and outage logging for talking to an API server that may be down, slow or busy.

An API server that is down, slow or answers 409/429/5xx is retried with backoff and logged once
per outage; the slice converges when it returns (docs/agent.md, "Publishing"). A node must not
flood the log (one line per failed retry would, over a long outage) nor the server (retrying at
once would, and thousands of nodes retrying in step after a restart of the API server would
too: every delay is jittered). :class:`RetrySchedule` is the one schedule every writer uses.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Protocol

from .client import ApiError


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
    """Exponential delays: ``initial``, doubling, at most ``maximum``; reset on success.

    Each delay is drawn from ``[d * (1 - jitter), d]`` where ``d`` is the exponential step
    ("equal jitter" with the default 0.5): consecutive delays still never shrink below the
    step, yet nodes that failed together do not come back together. ``at_least`` (a
    ``Retry-After`` hint, say) is a floor the jitter never goes under.
    """

    def __init__(self, initial: float = 0.5, maximum: float = 30.0, jitter: float = 0.5,
                 rng: Callable[[], float] = random.random) -> None:
        if not 0.0 <= jitter <= 1.0:
            raise ValueError("jitter is a fraction between 0 and 1")
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self._rng = rng
        self._next = initial

    def next(self, at_least: float = 0.0) -> float:
        step = self._next
        self._next = min(self._next * 2, self.maximum)
        delay = step * (1.0 - self.jitter * self._rng())
        return min(max(delay, at_least), max(self.maximum, at_least))

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


class RetrySchedule:
    """When a writer tries again after a failed request, and what it logs meanwhile.

    One schedule for every API writer: 422 (the server refuses what we validated; it may be of
    another version than we checked against) is logged once per message and retried at the
    slowest pace; anything else is an outage (logged when it starts and when it ends) retried
    with backoff, a 429/503 ``Retry-After`` honoured as a floor.
    """

    def __init__(self, log: logging.Logger, subject: str, doing: str, initial: float = 0.5,
                 maximum: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        """``subject`` names the object ("ResourceSlice n-liken.sh"), ``doing`` the work
        ("publishing"): the log says "publishing ResourceSlice n-liken.sh: ..."."""
        self._log = log
        self.subject = subject
        self.backoff = Backoff(initial, maximum)
        self.outage = OutageLog(log, f"{doing} {subject}")
        self._clock = clock
        self._refused_said: str | None = None
        self.retry_at: float | None = None

    def failed(self, err: ApiError) -> float:
        """Schedule the next attempt after ``err``; the delay in seconds."""
        if err.code == 422:
            if err.message != self._refused_said:
                self._log.error("the API server refused %s: %s", self.subject, err)
                self._refused_said = err.message
            delay = self.backoff.next(at_least=self.backoff.maximum)
        else:
            self.outage.failed(str(err))
            delay = self.backoff.next(at_least=err.retry_after or 0.0)
        self.retry_at = self._clock() + delay
        return delay

    def succeeded(self, detail: str = "") -> None:
        self.retry_at = None
        self._refused_said = None
        self.backoff.reset()
        self.outage.recovered(detail)

    def clear(self) -> None:
        """A new attempt starts now: nothing scheduled until it fails."""
        self.retry_at = None

    def retry_in(self, now: float | None = None) -> float | None:
        """Seconds until the next attempt is due (0 when overdue), None when none is scheduled."""
        if self.retry_at is None:
            return None
        return max(0.0, self.retry_at - (self._clock() if now is None else now))
