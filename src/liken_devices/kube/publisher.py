"""Keeping ``<node>-liken.sh`` equal to what the last walk found.

rules: limits.one-slice, limits.cap. Each node publishes one ResourceSlice named
``<node>-liken.sh`` with at most 128 devices. How it is written (docs/agent.md, "Publishing"):

* server-side apply with our field manager, forced, carrying the resourceVersion we read, so
  a concurrent writer makes us re-read (409) instead of being overwritten blindly;
* an owner reference to the Node (its uid read from the API), so the slice goes with the Node;
* ``pool.generation`` raised on every change (consumers use only the highest generation of a
  pool, KEP-4381), and nothing written when the devices are already the ones stored;
* recreated when it disappears: the kubelet deletes every slice of its node when it starts
  (KEP-4381); the agent's watch tells us (``observe``) and the next ``sync`` re-creates;
* an API server that is down, slow, or answers 409/429/5xx is retried with backoff (the caller
  asks :meth:`SlicePublisher.retry_in` when to call again) and logged once per outage;
* an API server whose DRAConsumableCapacity gate is off silently drops
  ``allowMultipleAllocations`` (KEP-5075): we compare what it stored with what we sent, say so
  once, tell ``on_sharing`` (the agent sets the Machine condition ``SharingAvailable``), and stop
  treating the difference as a change.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from typing import Any

from ..inventory.limits import DRIVER, slice_name
from ..slices import make_slice, validate_slice
from .client import FIELD_MANAGER, ApiError, Resources, as_dict
from .retry import ApiMetrics, NullMetrics, RetrySchedule

log = logging.getLogger(__name__)

GATE_MESSAGE = ("the API server dropped allowMultipleAllocations from the slice: render nodes "
                "cannot be shared between claims; enable the DRAConsumableCapacity feature gate "
                "(alpha and off in Kubernetes 1.34-1.35, on by default from 1.36)")

# Retryable answers: conflict (re-read), throttled, and the server's own failures.
_TRANSIENT = {409, 429, 500, 502, 503, 504}


def _strip_shared(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(devices)
    for d in out:
        d.pop("allowMultipleAllocations", None)
    return out


def _has_shared(devices: list[dict[str, Any]]) -> bool:
    return any(d.get("allowMultipleAllocations") is True for d in devices)


class SlicePublisher:
    """Converges the node's slice to the desired devices; see the module docstring."""

    def __init__(self, client: Any, node: str, driver: str = DRIVER,
                 metrics: ApiMetrics | None = None, validate: bool = True,
                 on_sharing: Callable[[bool], None] | None = None) -> None:
        """``on_sharing(available)`` is called when a write's answer shows whether the server
        keeps ``allowMultipleAllocations`` (first write, and every change of mind)."""
        self._client = client
        self.node = node
        self.driver = driver
        self.name = slice_name(node, driver)
        self._metrics: ApiMetrics = metrics or NullMetrics()
        self._validate = validate
        self._lock = threading.Lock()
        self._desired: list[dict[str, Any]] | None = None
        self._stored: dict[str, Any] | None = None  # the server's copy as last seen
        self._stored_known = False  # False: read it before deciding
        # Raised whenever the watch tells us something about the stored slice. A write's answer
        # is kept only if nothing was seen while it was on its way: otherwise the watch's news
        # (a deletion by the kubelet, say) is newer than the answer and must not be overwritten.
        self._seen = 0
        self._node_uid: str | None = None
        self.generation = 0  # the highest generation seen or written
        self.gate_off = False  # the server drops allowMultipleAllocations
        self._gate_said = False
        self._on_sharing = on_sharing
        self.sharing_available: bool | None = None  # None: not known yet
        self._invalid_said: str | None = None
        self._retry = RetrySchedule(log, f"ResourceSlice {self.name}", "publishing")
        self.writes = 0

    # ---- inputs ------------------------------------------------------------------------------

    def set_devices(self, devices: list[dict[str, Any]]) -> None:
        """The devices the slice must list (API form, e.g. ``slices.devices_json``)."""
        with self._lock:
            self._desired = sorted(copy.deepcopy(devices), key=lambda d: str(d.get("name")))

    def observe(self, event: str, obj: dict[str, Any] | None) -> bool:
        """A watch event for our slice (or "RESYNC" after a reconnect); True when out of sync."""
        with self._lock:
            if event == "RESYNC" or obj is None:
                self._stored_known = False
                self._seen += 1
                return True
            if obj.get("metadata", {}).get("name") != self.name:
                return False
            self._seen += 1
            if event == "DELETED":
                self._stored, self._stored_known = None, True
                # The Node may be gone and back with a new uid (the garbage collector then
                # deletes a slice owned by the old one): read the uid again before re-creating.
                self._node_uid = None
            else:
                stored_rv = (self._stored or {}).get("metadata", {}).get("resourceVersion")
                if stored_rv == obj["metadata"].get("resourceVersion"):
                    return False  # our own write coming back
                self._stored, self._stored_known = copy.deepcopy(obj), True
            return not self._in_sync()

    # ---- state -------------------------------------------------------------------------------

    @property
    def converged(self) -> bool:
        with self._lock:
            return self._retry.retry_at is None and self._stored_known and self._in_sync()

    def retry_in(self, now: float | None = None) -> float | None:
        """Seconds until the next attempt is due (0 when overdue), None when none is scheduled."""
        return self._retry.retry_in(now)

    def _in_sync(self) -> bool:
        """Whether the stored slice is the one we would write (the caller holds the lock)."""
        if self._desired is None:
            return True
        stored = self._stored
        if stored is None:
            return False
        spec = stored.get("spec") or {}
        want = _strip_shared(self._desired) if self.gate_off else self._desired
        if (spec.get("devices") or []) != want:
            return False
        if spec.get("nodeName") != self.node or spec.get("driver") != self.driver:
            return False
        pool = spec.get("pool") or {}
        if pool.get("name") != self.node or pool.get("resourceSliceCount") != 1:
            return False
        owners = stored.get("metadata", {}).get("ownerReferences") or []
        return self._node_uid is None or any(
            o.get("kind") == "Node" and o.get("uid") == self._node_uid for o in owners)

    # ---- the work ----------------------------------------------------------------------------

    def sync(self) -> bool:
        """One attempt to converge; True when the slice is right (written or already so).

        On a failure the next attempt is scheduled (``retry_in``) and False is returned.
        """
        if self._desired is None:
            return True
        self._retry.clear()
        try:
            for _ in range(3):  # a 409 means someone wrote in between: read again, at once
                try:
                    done = self._attempt()
                except _Reread as exc:
                    self._metrics.api_error("slice", exc.code)
                    with self._lock:
                        self._stored_known = False
                    continue
                if done:
                    self._retry.succeeded(f"slice {self.name} in sync "
                                          f"(generation {self.generation})")
                return True
            raise ApiError(409, "conflicting writes on three attempts in a row")
        except Exception as exc:
            self._failed(ApiError.of(exc))
            return False

    def _attempt(self) -> bool:
        if self._node_uid is None:
            node = as_dict(self._client.get(Resources.node(), self.node))
            self._node_uid = str(node["metadata"]["uid"])
        with self._lock:
            known = self._stored_known
        if not known:
            current = self._read()
            with self._lock:
                self._stored, self._stored_known = current, True
        with self._lock:
            if self._in_sync():
                self._adopt_generation()
                return True
            desired = copy.deepcopy(self._desired or [])
            current = copy.deepcopy(self._stored)
            seen = self._seen
        if current is not None:
            self.generation = max(self.generation,
                                  int(current["spec"].get("pool", {}).get("generation", 0)))
        generation = self.generation + 1
        obj = self._build(desired, generation)
        if current is not None:
            obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if self._validate and not self._locally_valid(obj):
            return True  # nothing to retry: the same devices would fail the same way
        res = Resources.slice()
        try:
            stored = as_dict(self._client.apply(res.from_dict(obj), field_manager=FIELD_MANAGER,
                                                force=True))
        except Exception as exc:
            code = ApiError.of(exc).code
            # 409: written since we read it; 404: deleted since we read it (an apply carrying a
            # resourceVersion does not create). Either way: read again and decide again.
            if code in (404, 409):
                raise _Reread(code) from exc
            raise
        self.writes += 1
        self.generation = int(stored.get("spec", {}).get("pool", {}).get("generation",
                                                                         generation))
        self._check_dropped(desired, stored)
        with self._lock:
            if self._seen == seen:
                self._stored, self._stored_known = stored, True
        count = len(stored.get("spec", {}).get("devices") or [])
        log.info("published ResourceSlice %s: %d devices, generation %d", self.name, count,
                 self.generation)
        self._metrics.published(count, self.generation)
        return True

    def _adopt_generation(self) -> None:
        if self._stored is not None:
            gen = int(self._stored.get("spec", {}).get("pool", {}).get("generation", 0))
            self.generation = max(self.generation, gen)

    def _read(self) -> dict[str, Any] | None:
        try:
            return as_dict(self._client.get(Resources.slice(), self.name))
        except Exception as exc:
            if ApiError.of(exc).code == 404:
                return None
            raise

    def _build(self, devices: list[dict[str, Any]], generation: int) -> dict[str, Any]:
        return make_slice(self.node, self.driver, devices, generation=generation,
                          owner_uid=self._node_uid)

    def _locally_valid(self, obj: dict[str, Any]) -> bool:
        problems = validate_slice(obj)
        if not problems:
            self._invalid_said = None
            return True
        text = "; ".join(problems)
        if text != self._invalid_said:
            log.error("not publishing ResourceSlice %s: it would be invalid: %s", self.name, text)
            self._invalid_said = text
        return False

    def _check_dropped(self, sent: list[dict[str, Any]], stored: dict[str, Any]) -> None:
        kept = stored.get("spec", {}).get("devices") or []
        if not _has_shared(sent):
            return
        if _has_shared(kept):
            if self.gate_off:
                log.warning("the API server keeps allowMultipleAllocations again: render nodes "
                            "can be shared")
            self.gate_off = False
            self._sharing(True)
            return
        if _strip_shared(sent) == kept:
            self.gate_off = True
            if not self._gate_said:
                log.error(GATE_MESSAGE)
                self._gate_said = True
            self._sharing(False)

    def _sharing(self, available: bool) -> None:
        if self.sharing_available is available:
            return
        self.sharing_available = available
        if self._on_sharing is not None:
            self._on_sharing(available)

    def _failed(self, err: ApiError) -> None:
        self._metrics.api_error("slice", err.code)
        self._retry.failed(err)
        if err.code not in _TRANSIENT and err.code != 422:
            with self._lock:
                self._stored_known = False  # after an outage, read before deciding


class _Reread(Exception):
    """The object changed under us; read it again (not a failure by itself)."""

    def __init__(self, code: int | None) -> None:
        super().__init__(f"{code}: the slice changed since it was read")
        self.code = code
