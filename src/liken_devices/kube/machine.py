"""The node's Machine: its spec read, its status written.

rules: machine.object, machine.unclaimed, machine.facts-condition. The Machine
(``liken.sh/v1alpha1``, cluster-scoped, named after the node) gives ``spec.modules`` and
``spec.serio``; its status lists ``hardware.unclaimed`` (hardware no driver drives, with the modules
that could) and the ``FactsPublished`` condition (True/``FactsRead``, or False/``FactsUnreadable``
with the error, when the facts could not be read and no disk is offered). The machine side adds
``modules``, ``serio`` and its own conditions (a fragment merged in here), and the agent adds
``SharingAvailable`` once the API server showed whether it keeps ``allowMultipleAllocations``
(docs/agent.md, "The Machine"). The status goes through the status subresource and is written only
when it changes; a condition keeps its ``lastTransitionTime`` while its status stays the same.
"""

from __future__ import annotations

import copy
import logging
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..inventory.context import InputError
from ..inventory.machinefile import parse_machine
from ..inventory.model import MachineSpec
from .client import ApiError, Resources, as_dict
from .retry import ApiMetrics, NullMetrics, RetrySchedule

if TYPE_CHECKING:
    from ..inventory.model import Inventory

log = logging.getLogger(__name__)

FACTS_CONDITION = "FactsPublished"
SHARING_CONDITION = "SharingAvailable"


def sharing_condition(available: bool) -> dict[str, Any]:
    """Whether the API server keeps ``allowMultipleAllocations`` (the DRAConsumableCapacity
    feature gate, KEP-5075): without it every render node is exclusive to one claim."""
    if available:
        return {"type": SHARING_CONDITION, "status": "True", "reason": "SharingKept",
                "message": "the API server keeps allowMultipleAllocations: render nodes can be "
                           "shared between claims"}
    return {"type": SHARING_CONDITION, "status": "False", "reason": "SharingDropped",
            "message": "the API server dropped allowMultipleAllocations from the slice: each "
                       "render node goes to one claim at a time; enable the "
                       "DRAConsumableCapacity feature gate"}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def facts_condition(inv: Inventory) -> dict[str, Any]:
    if inv.facts.readable:
        return {"type": FACTS_CONDITION, "status": "True", "reason": "FactsRead",
                "message": "storage roles read from init's facts"}
    return {"type": FACTS_CONDITION, "status": "False", "reason": "FactsUnreadable",
            "message": inv.facts.error or "the facts could not be read; no disk is offered"}


def build_status(inv: Inventory, fragment: dict[str, Any] | None,
                 previous: dict[str, Any] | None, generation: int | None) -> dict[str, Any]:
    """The Machine's whole status for this walk (the agent owns all of it)."""
    status: dict[str, Any] = {
        "hardware": {"unclaimed": [u.to_status() for u in inv.unclaimed]},
    }
    conditions = [facts_condition(inv)]
    for key, value in (fragment or {}).items():
        if key == "conditions":
            conditions.extend(copy.deepcopy(c) for c in value
                              if c.get("type") != FACTS_CONDITION)
        elif key == "hardware":
            continue  # ours
        else:
            status[key] = copy.deepcopy(value)
    old = {c.get("type"): c for c in (previous or {}).get("conditions") or []}
    for cond in conditions:
        before = old.get(cond["type"])
        if before is not None and before.get("status") == cond["status"] \
                and before.get("lastTransitionTime"):
            cond["lastTransitionTime"] = before["lastTransitionTime"]
        else:
            cond.setdefault("lastTransitionTime", _now())
        if generation is not None:
            cond["observedGeneration"] = generation
    status["conditions"] = sorted(conditions, key=lambda c: str(c["type"]))
    return status


class MachineReporter:
    """Reads the Machine's spec and keeps its status equal to the last walk's."""

    def __init__(self, client: Any, node: str, metrics: ApiMetrics | None = None) -> None:
        self._client = client
        self.node = node
        self._metrics: ApiMetrics = metrics or NullMetrics()
        self._lock = threading.Lock()
        self._machine: dict[str, Any] | None = None  # the server's copy as last seen
        self._known = False
        self._missing_said = False
        self._bad_spec_said: str | None = None
        self._spec = MachineSpec()
        self._desired: dict[str, Any] | None = None
        self._sharing: dict[str, Any] | None = None  # the SharingAvailable condition, once known
        self._inputs: tuple[Inventory, dict[str, Any] | None] | None = None
        self._retry = RetrySchedule(log, f"Machine {node} status", "reporting")
        self.writes = 0

    # ---- the spec ----------------------------------------------------------------------------

    @property
    def spec(self) -> MachineSpec:
        with self._lock:
            return self._spec

    @property
    def spec_error(self) -> str | None:
        """Why the Machine's current spec was refused (the previous one is kept), or None."""
        return self._bad_spec_said

    @property
    def generation(self) -> int | None:
        with self._lock:
            if self._machine is None:
                return None
            gen = self._machine.get("metadata", {}).get("generation")
            return int(gen) if gen is not None else None

    @property
    def previous_status(self) -> dict[str, Any] | None:
        with self._lock:
            return copy.deepcopy((self._machine or {}).get("status"))

    def refresh(self) -> MachineSpec:
        """Read the Machine now (at start, and after a watch reconnect); the spec it gives."""
        try:
            obj = as_dict(self._client.get(Resources.machine(), self.node))
        except Exception as exc:
            err = ApiError.of(exc)
            if err.code == 404:
                self._set(None)
                return self.spec
            self._metrics.api_error("machine", err.code)
            self._retry.failed(err)
            return self.spec
        self._set(obj)
        return self.spec

    def observe(self, event: str, obj: dict[str, Any] | None) -> bool:
        """A watch event for the Machine; True when its spec changed (a walk is due)."""
        if event == "RESYNC" or obj is None:
            before = self.spec
            self.refresh()
            return self.spec != before
        if obj.get("metadata", {}).get("name") != self.node:
            return False
        before = self.spec
        self._set(None if event == "DELETED" else obj)
        return self.spec != before

    def _set(self, obj: dict[str, Any] | None) -> None:
        with self._lock:
            self._machine, self._known = copy.deepcopy(obj), True
        if obj is None:
            if not self._missing_said:
                log.warning("no Machine named %s: using an empty spec, no status reported",
                            self.node)
                self._missing_said = True
            spec = MachineSpec()
        else:
            self._missing_said = False
            try:
                spec = parse_machine(obj, f"Machine {self.node}")
                self._bad_spec_said = None
            except InputError as exc:
                if str(exc) != self._bad_spec_said:
                    log.error("%s; keeping the previous spec", exc)
                    self._bad_spec_said = str(exc)
                spec = self.spec
        with self._lock:
            self._spec = spec

    # ---- the status --------------------------------------------------------------------------

    def set_status(self, inv: Inventory, fragment: dict[str, Any] | None = None) -> None:
        with self._lock:
            self._inputs = (inv, fragment)
            sharing = copy.deepcopy(self._sharing)
        if sharing is not None:
            fragment = dict(fragment or {})
            fragment["conditions"] = [*(fragment.get("conditions") or []), sharing]
        desired = build_status(inv, fragment, self.previous_status, self.generation)
        with self._lock:
            self._desired = desired

    def set_sharing(self, available: bool) -> bool:
        """Report ``SharingAvailable``; True when the desired status changed (a sync is due)."""
        cond = sharing_condition(available)
        with self._lock:
            if self._sharing == cond:
                return False
            self._sharing = cond
            inputs = self._inputs
        if inputs is None:
            return False  # the next walk's status carries it
        self.set_status(*inputs)
        return not self.in_sync()

    def retry_in(self, now: float | None = None) -> float | None:
        return self._retry.retry_in(now)

    def in_sync(self) -> bool:
        with self._lock:
            if self._desired is None:
                return True
            if self._machine is None:
                return self._known  # no Machine: nothing to write to
            return self._machine.get("status") == self._desired

    def sync(self) -> bool:
        """Patch the status when it differs; True when nothing is left to do."""
        self._retry.clear()
        with self._lock:
            known, desired = self._known, copy.deepcopy(self._desired)
        if desired is None:
            return True
        if not known:
            self.refresh()
            if self._retry.retry_at is not None:
                return False
        if self.in_sync():
            return True
        with self._lock:
            current = (self._machine or {}).get("status") or {}
        patch: dict[str, Any] = {"status": dict(desired)}
        for key in current:
            if key not in desired:
                patch["status"][key] = None  # merge patch: remove what we no longer report
        # deferred: lightkube, 90-190 ms an offline agent never loads (tests/test_layers.py)
        from lightkube.types import PatchType

        try:
            stored = as_dict(self._client.patch(Resources.machine().Status, self.node, patch,
                                                patch_type=PatchType.MERGE))
        except Exception as exc:
            err = ApiError.of(exc)
            self._metrics.api_error("machine", err.code)
            if err.code == 404:
                self._set(None)
                return True
            self._retry.failed(err)
            if err.code != 422:
                with self._lock:
                    self._known = False
            return False
        self.writes += 1
        self._retry.succeeded(f"Machine {self.node} status written")
        with self._lock:
            self._machine = stored
        log.info("reported Machine %s status: %d unclaimed, %s", self.node,
                 len(desired["hardware"]["unclaimed"]),
                 ", ".join(f"{c['type']}={c['status']}" for c in desired["conditions"]))
        return True
