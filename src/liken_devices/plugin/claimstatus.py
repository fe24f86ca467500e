"""Telling the pod's operator what its claim delivered: the claim's ``status.devices``.

Nothing in a pod says which ``/dev`` nodes its claim brought (a USB serial adapter may be
``ttyUSB0`` today and ``ttyACM1`` after a replug). Kubernetes gives the driver a place for it:
``ResourceClaim.status.devices[]`` (AllocatedDeviceStatus, KEP-4817; beta from 1.33, GA in 1.37),
written through the claim's ``status`` subresource, one entry per allocated device, keyed by
driver, pool, device and shareID. This module writes liken.sh's entries
(rules: delivery.claim-status):

* :func:`device_entries` is pure: a prepared claim's devices as entries whose ``data`` holds the
  paths its CDI spec delivers now (none while the hardware is away, ``present`` false) and the
  device's stable attributes (bus, address, serial where the device has one).
* :class:`ClaimStatusWriter` applies them in the background, by server-side apply under the
  driver's own field manager (``liken.sh``): the prepare answers the kubelet without waiting for
  an API round trip. Wanted states are coalesced per claim (the newest wins), the queue is
  bounded, a failed write is retried with the writers' common backoff (``kube.retry``), and an
  apply of an empty list on unprepare removes this manager's entries only.
* An API server that drops the field (the DRAResourceClaimDeviceStatus gate off) is said once in
  the log, and nothing more is written.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..inventory.limits import DRIVER
from ..inventory.model import AttrValue
from ..kube.client import ApiError, Resources, as_dict
from ..kube.retry import RetrySchedule
from .state import PreparedClaim

log = logging.getLogger(__name__)

FIELD_MANAGER = DRIVER  # the driver's own manager: an empty apply removes only its entries
STABLE_ATTRIBUTES = ("bus", "address", "serial")  # what identifies the hardware across replugs
DATA_MAX_BYTES = 10 * 1024  # AllocatedDeviceStatusDataMaxLength
MAX_PENDING = 1024  # claims waiting for a write; past it the oldest wait is dropped, logged
GATE_MESSAGE = ("the API server dropped status.devices from ResourceClaim {ref}: the pods' "
                "claims will not say which device nodes they got; enable the "
                "DRAResourceClaimDeviceStatus feature gate (beta and on from Kubernetes 1.33, GA "
                "in 1.37)")


def device_entries(claim: PreparedClaim,
                   facts: Mapping[str, Mapping[str, AttrValue]]) -> list[dict[str, Any]]:
    """The claim's ``status.devices`` entries of this driver: one per (device, shareID), in a
    stable order. ``facts``: device name -> its attributes as last published."""
    entries: list[dict[str, Any]] = []
    for d in sorted(claim.devices, key=lambda d: (d.name, d.share_id or "")):
        present = claim.present.get(d.name, False)
        paths = [n.path for n in claim.nodes.get(d.name, ())] if present else []
        data: dict[str, Any] = {"present": present, "paths": paths}
        known = facts.get(d.name, {})
        data.update({k: known[k] for k in STABLE_ATTRIBUTES if k in known})
        while paths and len(json.dumps(data)) > DATA_MAX_BYTES:  # never refused for its size
            paths.pop()
            data["truncated"] = True
        entry: dict[str, Any] = {"driver": DRIVER, "pool": claim.pool, "device": d.name}
        if d.share_id:
            entry["shareID"] = d.share_id
        entry["data"] = data
        entries.append(entry)
    return entries


def stable_facts(attributes: Mapping[str, AttrValue]) -> dict[str, AttrValue]:
    return {k: attributes[k] for k in STABLE_ATTRIBUTES if k in attributes}


@dataclass(frozen=True, slots=True)
class _Want:
    uid: str
    namespace: str
    name: str
    entries: tuple[str, ...]  # each entry as canonical JSON: comparable, immutable

    @property
    def devices(self) -> list[dict[str, Any]]:
        return [json.loads(e) for e in self.entries]


def _canonical(entries: list[dict[str, Any]]) -> tuple[str, ...]:
    return tuple(json.dumps(e, sort_keys=True, separators=(",", ":")) for e in entries)


class ClaimStatusWriter:
    """Applies each claim's wanted ``status.devices`` entries from one background thread."""

    def __init__(self, client: Any, *, max_pending: int = MAX_PENDING,
                 initial: float = 0.5, maximum: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._max_pending = max_pending
        self._clock = clock
        self._cond = threading.Condition()
        self._pending: OrderedDict[str, _Want] = OrderedDict()
        self._stored: dict[str, tuple[str, ...]] = {}  # uid -> entries the server holds
        self._retry = RetrySchedule(log, "the claims' status.devices", "writing",
                                    initial=initial, maximum=maximum, clock=clock)
        self._refused: dict[str, str] = {}  # uid -> the 422 already said
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._busy = False
        self.unsupported = False  # the server dropped the field: nothing more is written
        self.writes = 0
        self.dropped = 0

    # -- inputs ----------------------------------------------------------------------------------

    def want(self, uid: str, namespace: str, name: str, entries: list[dict[str, Any]]) -> None:
        """The entries the claim's status must hold ([] : none of ours); written soon, unless
        the server holds them already as far as this writer knows."""
        if not name:
            return  # rebuilt from its spec: the API cannot be addressed without its name
        want = _Want(uid, namespace, name, _canonical(entries))
        with self._cond:
            if self.unsupported:
                return
            if uid not in self._pending and self._stored.get(uid) == want.entries:
                return
            self._pending.pop(uid, None)
            self._pending[uid] = want  # the newest wish of a claim, at the back of the queue
            while len(self._pending) > self._max_pending:
                old, _ = self._pending.popitem(last=False)
                self.dropped += 1
                log.warning("too many claims waiting for their status to be written: claim "
                            "%s's waits for its next change", old)
            self._cond.notify_all()

    def forget(self, uid: str, namespace: str, name: str) -> None:
        """The claim was unprepared: remove this driver's entries (an empty apply)."""
        with self._cond:
            self._stored.pop(uid, None)  # what another instance wrote is not known here
        self.want(uid, namespace, name, [])

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            self._stopping = False
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._run, name="liken-claim-status",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def idle(self) -> bool:
        """Nothing waiting and nothing on its way (what tests and the benchmark wait for)."""
        with self._cond:
            return not self._pending and not self._busy

    def pending(self) -> list[str]:
        with self._cond:
            return list(self._pending)

    def flush(self) -> None:
        """Write what waits now, in this thread, once each (a failure waits for the thread)."""
        with self._cond:
            wants = list(self._pending.values())
            self._pending.clear()
        for want in wants:
            self.write_once(want)

    # -- the writer ------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    wait = self._retry.retry_in()
                    if self._pending and (wait is None or wait <= 0):
                        break
                    self._cond.wait(wait if self._pending and wait is not None else None)
                if self._stopping:
                    return
                _, want = self._pending.popitem(last=False)
                self._busy = True
            try:
                self.write_once(want)
            finally:
                with self._cond:
                    self._busy = False

    def write_once(self, want: _Want) -> None:
        """One apply of ``want``; on a failure worth retrying it waits again, unless a newer
        wish replaced it meanwhile."""
        ref = f"{want.namespace}/{want.name}"
        try:
            stored = self._apply(want)
        except Exception as exc:
            err = ApiError.of(exc)
            if err.code == 404 or (err.code == 409 and "UID" in err.message):
                self._done(want, None)  # the claim is gone or replaced: nothing to tell
                return
            if err.code == 422:
                if self._refused.get(want.uid) != err.message:
                    log.error("the API server refused the status of ResourceClaim %s: %s", ref,
                              err)
                    self._refused[want.uid] = err.message
                self._done(want, None)  # retrying the same entries cannot help
                return
            with self._cond:
                self._retry.failed(err)
                if want.uid not in self._pending:
                    self._pending[want.uid] = want
                    self._pending.move_to_end(want.uid, last=False)
            return
        self._retry.succeeded()
        self._refused.pop(want.uid, None)
        self.writes += 1
        got = _canonical([d for d in ((stored.get("status") or {}).get("devices") or [])
                          if isinstance(d, dict) and d.get("driver") == DRIVER])
        if want.entries and not got:
            with self._cond:
                if not self.unsupported:
                    log.warning(GATE_MESSAGE.format(ref=ref))
                self.unsupported = True
                self._pending.clear()
            return
        self._done(want, want.entries or None)

    def _done(self, want: _Want, stored: tuple[str, ...] | None) -> None:
        with self._cond:
            if stored is None:
                self._stored.pop(want.uid, None)
            else:
                self._stored[want.uid] = stored

    def _apply(self, want: _Want) -> dict[str, Any]:
        # deferred: lightkube's types, as kube.machine does (tests/test_layers.py)
        from lightkube.types import PatchType

        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": want.name, "namespace": want.namespace, "uid": want.uid},
                "status": {"devices": want.devices}}
        return as_dict(self._client.patch(Resources.claim().Status, want.name, body,
                                          namespace=want.namespace, patch_type=PatchType.APPLY,
                                          field_manager=FIELD_MANAGER, force=True))
