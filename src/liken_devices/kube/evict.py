"""A pod asking the API server to evict itself, through the Eviction API.

rules: media.missing-render-node. A render node that liken publishes after the media agent's pod
was created is not in that pod's claim; the agent evicts its own pod so the DaemonSet's next pod
gets a claim that includes the node. An eviction (``POST .../pods/<name>/eviction``, a
``policy/v1`` Eviction) rather than a delete, because an eviction honours a PodDisruptionBudget:
while the budget allows no disruption the server answers 429, and the pod stays and asks again
later (on the one retry schedule, logged once per refusal streak). 404 means the pod is gone
already: done.
"""

from __future__ import annotations

import logging
from typing import Any

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from .client import ApiError
from .retry import RetrySchedule

log = logging.getLogger(__name__)


class PodEvictor:
    """Evicts one pod (``namespace/name``) once asked, retrying until the server agrees."""

    def __init__(self, client: Any, namespace: str, name: str) -> None:
        self._client = client
        self.namespace = namespace
        self.name = name
        self.wanted = False
        self.done = False
        self._retry = RetrySchedule(log, f"pod {namespace}/{name}", "evicting")

    def request(self) -> None:
        """Ask for the eviction; :meth:`attempt` does it (now, and on every retry)."""
        self.wanted = True

    def retry_in(self, now: float | None = None) -> float | None:
        """Seconds until the next attempt is due, None when none is scheduled."""
        return self._retry.retry_in(now)

    def due(self, now: float | None = None) -> bool:
        if not self.wanted or self.done:
            return False
        wait = self.retry_in(now)
        return wait is None or wait <= 0

    def attempt(self) -> bool:
        """One eviction request; True when the server accepted it (or the pod is gone)."""
        if self.done:
            return True
        self._retry.clear()
        try:
            self._client.create(_eviction(self.namespace, self.name), self.name,
                                namespace=self.namespace)
        except Exception as exc:
            err = ApiError.of(exc)
            if err.code != 404:
                # 429: a PodDisruptionBudget allows no disruption now; anything else: the API
                # server or RBAC. Either way, the same request later.
                self._retry.failed(err)
                return False
        self.done = True
        self._retry.succeeded(f"pod {self.namespace}/{self.name} evicted")
        log.info("asked the API server to evict pod %s/%s", self.namespace, self.name)
        return True


def _eviction(namespace: str, name: str) -> Any:
    return Pod.Eviction(metadata=ObjectMeta(name=name, namespace=namespace))
