"""The node agent's loop: the kernel's uevents in, a walk, then the slice, the plugin, the Machine.

The rules of docs/rules/ (what a node publishes, uevents, delivery, the Machine, limits), as
``docs/agent.md`` describes them:

* one process walks sysfs, publishes ``<node>-liken.sh``, serves the kubelet plugin and reports
  the Machine;
* it walks once at start, then one second after the last uevent of a burst and at most five
  seconds after its first; only a device arriving, leaving or changing its driver wakes a walk,
  and virtual network devices wake nothing (``uevent.wakes_walk``);
* every walk takes the claims the plugin has prepared (the plugin's state): a claimed USB device
  keeps its shape until its claim ends, and the 128 cap keeps what is claimed
  (rules: usb.claimed-keeps-shape, limits.cap-keeps-claimed); an unprepare that ends a claim wakes a
  walk, so what the claim held is published as the kernel then shows it;
* after each walk: its devices to every publisher (the API server's slice, ``--slice-out``'s
  file: ``slices.publish``), the plugin's reconcile pass, the machine side (modules and serial
  lines, ``docs/machine.md``), then the Machine's status;
* no polling loop: the thread sleeps in ``select`` on the uevent socket and a wake-up pipe, with a
  timeout only while a burst is pending or an API retry is scheduled, so an idle node costs no
  CPU;
* past the 128-device cap the device count is printed once on the console and logged; the
  inventory has already dropped the overflow;
* in a surge upgrade two instances run on the node, and their walks may differ (a new version's
  rules, new arguments, a claim one has prepared and the other not yet read): only the newest
  instance writes the slice, the Machine's status and the reconcile pass's CDI specs; the older
  stands by, checking every ``STANDBY_CHECK`` seconds whether the newer still runs
  (rules: limits.one-writer). Two writers that each restore their own view would rewrite the
  slice tens of times a second. An instance that cannot tell whether it is the newest (its
  holder file cannot be made, so the other one does not know it runs and writes) writes none of
  them either, says why in /readyz, and asks again at every check.

Watch threads (the slice, the Machine) and the machine side's line holder wake the loop through
the pipe with a :class:`Wake` reason; SIGTERM does too, and the loop then stops everything it
started.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .. import heap
from ..errors import InputError
from ..files import write_atomic
from ..inventory import Inventory, MachineSpec, Sources
from ..inventory.model import NO_CLAIMS, Claimed
from ..inventory.sources import FactsStamp, facts_stamp
from ..kube.machine import build_status
from ..kube.watch import Watch
from ..machine.conditions import spec_condition
from ..slices import devices_json
from ..slices.publish import Publisher
from .metrics import AgentMetrics
from .uevent import MAX_WAIT, QUIET, Debouncer, UeventSocket, wakes_walk

if TYPE_CHECKING:
    from ..sysfs.model import Snapshot

log = logging.getLogger(__name__)


class Wake(StrEnum):
    """Why another thread wakes the loop."""

    SLICE = "slice"  # the slice watch saw a change that is not ours: publish again
    REPORT = "report"  # the Machine appeared, or someone else changed its status: report
    CHECK = "check"  # a watch re-read may have scheduled a retry: recompute the timeout
    MACHINE_SPEC = "machine-spec"  # the Machine's spec changed: walk with it
    MACHINE_SIDE = "machine-side"  # a held serial line ended: walk, the machine side re-attaches
    CLAIMS = "claims"  # an unprepare ended a claim: walk, what it held publishes as it is now


def _same_claims(inv: Inventory, walked: Claimed, claimed: Claimed) -> bool:
    """Whether a walk told ``walked`` answers for ``claimed``: the same claims held, and the
    claims being prepared change nothing it decided (only a Bluetooth claim's count matters:
    rules: bluetooth.virtual-nodes)."""
    if walked == claimed:
        return True
    return walked.names == claimed.names and not walked.preparing and not any(
        d.kind == "bluetooth" and d.name in claimed.preparing for d in inv.devices)


class WalkReason(StrEnum):
    """Why a walk ran (the ``reason`` label of the walks metric)."""

    START = "start"
    UEVENT = "uevent"
    MACHINE = "machine"  # the Machine's spec or the machine side asked for it
    CLAIMS = "claims"  # the kubelet plugin ended a claim
    SERIO = "serio"  # a remove uevent while another process held a declared serial line


# What each wake does in the loop's pass.
_WALKS = frozenset({Wake.MACHINE_SPEC, Wake.MACHINE_SIDE, Wake.CLAIMS})


@dataclass
class AgentConfig:
    node: str
    sources: Sources
    console: Path | None = Path("/dev/console")
    quiet: float = QUIET
    max_wait: float = MAX_WAIT
    # Also write the Machine status's JSON here (offline runs, debugging; the slice's file is a
    # publisher: slices.publish.SliceFile).
    status_out: Path | None = None


class Reporter(Protocol):
    """What the loop needs of ``kube.MachineReporter``."""

    @property
    def spec(self) -> MachineSpec: ...

    @property
    def spec_error(self) -> str | None: ...

    def refresh(self) -> MachineSpec: ...

    def observe(self, event: str, obj: dict[str, Any] | None) -> bool: ...

    def in_sync(self) -> bool: ...

    def set_status(self, inv: Inventory, fragment: dict[str, Any] | None = None) -> None: ...

    def sync(self) -> bool: ...

    def retry_in(self, now: float | None = None) -> float | None: ...


class KubeletPlugin(Protocol):
    """What the loop needs of ``plugin.Plugin``."""

    @property
    def registered(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def claimed(self) -> Claimed: ...

    def reconcile(self, inv: Inventory) -> Any: ...


class MachineSideLike(Protocol):
    """What the loop needs of ``machine.MachineSide``."""

    def apply(self, spec: MachineSpec, snapshot: Snapshot) -> dict[str, Any]: ...

    def close(self) -> None: ...

    def waiting_for_release(self) -> bool: ...


# Seconds between checks, while a newer instance of a surge upgrade writes, whether it still runs.
STANDBY_CHECK = 2.0


class Agent:
    """See the module docstring. Every collaborator is optional, so offline runs and tests can
    leave out the API side (the API server's publisher, the ``reporter``), the ``plugin`` or the
    ``machine_side``. Each walk's devices go to every one of ``publishers``, in order; one that
    fails does not keep them from the others.
    """

    def __init__(self, config: AgentConfig, *, publishers: Sequence[Publisher] = (),
                 reporter: Reporter | None = None, plugin: KubeletPlugin | None = None,
                 machine_side: MachineSideLike | None = None,
                 metrics: AgentMetrics | None = None,
                 watches: list[Callable[[Agent], Watch]] | None = None) -> None:
        self.config = config
        self.publishers = tuple(publishers)
        self.reporter = reporter
        self.plugin = plugin
        self.machine_side = machine_side
        # ``run``'s caller releases the serial lines itself, last (release_lines).
        self.release_lines_at_exit = False
        self.metrics = metrics or AgentMetrics()
        self._watch_factories = watches or []
        self._watches: list[Watch] = []
        self._debounce = Debouncer(config.quiet, config.max_wait)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._pipe_lock = threading.RLock()  # a signal handler may re-enter
        self._reasons: deque[Wake] = deque()
        # A plain flag: request_stop runs in signal handlers, where taking a lock (as
        # threading.Event.set does) could deadlock against the interrupted main thread.
        self._stopping = False
        self._overflow_said: int | None = None
        self._standby: str | None = None  # the newer instance of an upgrade that writes
        self._blind: str | None = None  # why this instance cannot tell that it is the newest
        self._offline_status: dict[str, Any] | None = None
        self.inventory: Inventory | None = None
        # The last walk with what it was taken under (uevents seen, the facts, the spec), so the
        # plugin's prepare can reuse it while nothing it depends on has changed.
        self._last_walk: tuple[Inventory, int, FactsStamp, MachineSpec, Claimed] | None = None
        self._uevents_seen = 0
        self._uevent_fd: int | None = None
        self._walked_spec: MachineSpec | None = None
        self._file_spec = MachineSpec()  # the last good spec of --machine FILE
        self._file_spec_error: str | None = None
        self.walks = 0
        self.ready = threading.Event()  # set after the first walk's publish
        self._pass_started: float | None = None  # a pass is running since (monotonic)
        self._slice_written = False
        self.turns = 0

    # ---- waking the loop (any thread, signal handlers) ---------------------------------------

    def wake(self, reason: Wake) -> None:
        self._reasons.append(reason)
        self._poke(b"w")

    def request_stop(self, *_: object) -> None:
        self._stopping = True
        self._poke(b"s")

    def _poke(self, byte: bytes) -> None:
        with self._pipe_lock:
            if self._wake_w >= 0:
                with contextlib.suppress(BlockingIOError, OSError):
                    os.write(self._wake_w, byte)

    def on_slice_event(self, kind: str, obj: dict[str, Any] | None) -> None:
        if any([p.observe(kind, obj) for p in self.publishers]):  # each one sees the event
            self.wake(Wake.SLICE)

    def on_machine_event(self, kind: str, obj: dict[str, Any] | None) -> None:
        if self.reporter is None:
            return
        self.reporter.observe(kind, obj)
        if self.reporter.spec != self._walked_spec:
            self.wake(Wake.MACHINE_SPEC)
        elif not self.reporter.in_sync():
            self.wake(Wake.REPORT)
        elif kind == "RESYNC":
            self.wake(Wake.CHECK)

    # ---- what the probes ask (the endpoint's thread) -----------------------------------------

    STUCK_AFTER = 120.0  # seconds one pass may take before the agent counts as wedged

    def health(self) -> tuple[bool, str]:
        """/healthz: the loop turned recently, i.e. it sleeps waiting for work (an idle node
        never wakes it) or its current pass began less than ``STUCK_AFTER`` seconds ago."""
        if not self.ready.is_set():
            return False, "starting: the first walk has not finished"
        if self._stopping:
            return False, "stopping"
        started = self._pass_started
        if started is not None and time.monotonic() - started > self.STUCK_AFTER:
            return False, f"a pass of the loop has been running for over {self.STUCK_AFTER:g} s"
        return True, f"ok: {self.walks} walks, {self.turns} turns of the loop"

    def readiness(self) -> tuple[bool, str]:
        """/readyz: the first walk done, registered with the kubelet, the slice written, and
        this instance able to tell whether it is the node's one writer."""
        if not self.ready.is_set():
            return False, "the first walk has not finished"
        blind = self._blind
        if blind is not None:
            return False, blind
        plugin = self.plugin
        if plugin is not None and not plugin.registered:
            return False, "the kubelet has not registered the plugin"
        if not self._slice_written:
            if not all(p.writes or p.converged for p in self.publishers):
                return False, "the ResourceSlice is not written yet"
            self._slice_written = True
        return True, "ok"

    # ---- the machine spec --------------------------------------------------------------------

    def machine_spec(self) -> MachineSpec:
        if self.reporter is not None:
            spec: MachineSpec = self.reporter.spec
            return spec
        return self._read_file_spec()

    def _read_file_spec(self) -> MachineSpec:
        """``--machine FILE``'s spec. A file that became malformed (or unreadable) keeps the
        last good spec: the error is logged once and the ``SpecValid`` condition says it."""
        try:
            spec = self.config.sources.machine()
        except InputError as exc:
            if str(exc) != self._file_spec_error:
                log.error("%s; keeping the last good spec", exc)
                self._file_spec_error = str(exc)
            return self._file_spec
        if self._file_spec_error is not None:
            log.warning("the machine file is valid again")
            self._file_spec_error = None
        self._file_spec = spec
        return spec

    def spec_error(self) -> str | None:
        """Why the current spec was refused and the last good one is used, or None."""
        if self.reporter is not None:
            error: str | None = self.reporter.spec_error
            return error
        return self._file_spec_error

    def fresh_walk(self, *, claimed: Claimed) -> Inventory:
        """An inventory as fresh as a new walk, for the plugin's prepare (any thread).

        The plugin calls it under its lock and passes the claims it holds (``claimed``), so it
        must not ask the plugin for them.

        The last walk is reused when, since its snapshot was taken, no uevent arrived (none was
        read, and none waits unread on the socket), init's facts are the same files with the
        same contents' size and time, and the Machine's spec is the same: the kernel sends a
        uevent whenever a device arrives, leaves or changes its driver, which is all a walk
        reads that can change, so a new walk would find what the last one found. The storage
        recheck is done on that inventory either way. The claims must be the ones the last walk
        was told. Otherwise (or without a uevent socket) it
        walks again, with a new snapshot."""
        spec = self.machine_spec()
        last = self._last_walk
        if last is not None and self._uevent_fd is not None:
            inv, seen, stamp, walked_spec, walked_claims = last
            # The socket first, then the count: the loop counts before it reads (``_turn``),
            # so a uevent is either still on the socket or already counted.
            if not self._uevent_pending() and seen == self._uevents_seen \
                    and walked_spec == spec and _same_claims(inv, walked_claims, claimed) \
                    and facts_stamp(self.config.sources.facts) == stamp:
                return inv
        return self.config.sources.walk(spec, claimed=claimed)

    def _uevent_pending(self) -> bool:
        fd = self._uevent_fd
        if fd is None:
            return True
        try:
            ready, _, _ = select.select([fd], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(ready)

    def claimed(self) -> Claimed:
        """The claims prepared on this node, for the agent's own walk (none without a plugin)."""
        return self.plugin.claimed() if self.plugin is not None else NO_CLAIMS

    # ---- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        try:
            uevents = UeventSocket()
        except OSError as exc:
            log.error("cannot open the kernel's uevent socket: %s", exc)
            return 1
        self._uevent_fd = uevents.fileno()  # before the first snapshot: no uevent is missed
        # A signal the kernel hands to another thread (grpcio's, the endpoint's) runs its Python
        # handler only when the main thread next runs Python, and the loop may sleep in select
        # with no timeout: the C-level handler's byte on the loop's pipe wakes it.
        wakeup = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False) \
            if threading.current_thread() is threading.main_thread() else None
        try:
            if self.reporter is not None:
                self.reporter.refresh()
            for factory in self._watch_factories:
                self._watches.append(factory(self))
            if self.plugin is not None:
                self.plugin.start()
            self._walk(WalkReason.START)
            heap.settle()
            self.ready.set()
            self._loop(uevents)
        finally:
            if wakeup is not None:
                signal.set_wakeup_fd(wakeup)  # before the pipe closes and its number is reused
            self._shutdown(uevents)
        return 0

    def _timeout(self, now: float) -> float | None:
        deadlines = [d for d in (self._debounce.due_at(),) if d is not None]
        # Standing by, a retry that is due waits for the check (no busy loop on it).
        sides = (*self.publishers, self.reporter) if self._standby is None else ()
        if self._standby is not None:
            deadlines.append(now + STANDBY_CHECK)
        for side in sides:
            if side is not None:
                wait = side.retry_in(now)
                if wait is not None:
                    deadlines.append(now + wait)
        if not deadlines:
            return None  # sleep until the kernel or a watch has something to say
        return max(0.0, min(deadlines) - now)

    def _loop(self, uevents: UeventSocket) -> None:
        while not self._stopping:
            try:
                self._turn(uevents)
                self._pass_started = None
                self.turns += 1
            except Exception:
                self._pass_started = None
                # A bug in one pass must not end the node's agent: log it, and walk again soon.
                log.exception("agent loop pass failed")
                with contextlib.suppress(OSError, ValueError):  # never a busy loop
                    select.select([self._wake_r], [], [], 1.0)
                self._debounce.wake(time.monotonic())

    def _turn(self, uevents: UeventSocket) -> None:
        """One pass: wait for the kernel, a watch or a deadline, then do what is due."""
        fds = [uevents.fileno(), self._wake_r]
        if self._stopping:
            return
        timeout = self._timeout(time.monotonic())
        try:
            ready, _, _ = select.select(fds, [], [], timeout)
        except InterruptedError:
            return
        now = self._pass_started = time.monotonic()
        serio_now = False
        if uevents.fileno() in ready:
            # Counted before they are read: a prepare's fresh_walk (another thread) that finds
            # the socket empty must find the count moved too, or it would reuse an older walk.
            self._uevents_seen += 1
            for event in uevents.drain():
                self._uevents_seen += 1
                self.metrics.uevents.inc()
                if wakes_walk(event):
                    self._debounce.wake(now)
                    # A line another instance holds is attached within a second of its release
                    # (rules: serial.across-restarts): its serio port's remove uevent
                    # walks at once instead of after the burst's quiet second.
                    serio_now |= event.action == "remove" and self._serio_waiting()
                else:
                    self.metrics.uevents_ignored.inc()
        walk_now = publish_now = report_now = False
        claims_only = True  # every walking wake was an ended claim
        if self._wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 4096):
                    pass
            while self._reasons:
                reason = self._reasons.popleft()
                publish_now |= reason == Wake.SLICE
                report_now |= reason == Wake.REPORT
                walk_now |= reason in _WALKS
                claims_only &= reason is Wake.CLAIMS or reason not in _WALKS
        if self._stopping:
            return
        if serio_now:
            self._debounce.clear()
            self._walk(WalkReason.SERIO)
            return
        if walk_now or self._debounce.due(now):
            self._debounce.clear()
            self._walk(WalkReason.UEVENT if not walk_now else
                       WalkReason.CLAIMS if claims_only else WalkReason.MACHINE)
            return
        was_standby = self._standby is not None
        if self._superseded():
            return
        resumed = was_standby  # the newer instance ended: what this one walked is written now
        if resumed and self.inventory is not None:
            self._reconcile(self.inventory)
        for publisher in self.publishers:
            if publish_now or resumed or self._due(publisher, now):
                publisher.sync()
        if self.reporter is not None and (report_now or resumed
                                          or self._due(self.reporter, now)):
            self.reporter.sync()
            if self.reporter.spec != self._walked_spec:
                # The Machine could not be read when the last walk ran (an outage at start).
                self._walk(WalkReason.MACHINE)

    def _superseded(self) -> bool:
        """Whether a newer instance of a surge upgrade runs beside this one (the plugin's state
        knows its holders), in which case this one writes nothing to the API server. So does
        an instance that cannot tell (rules: limits.one-writer): the plugin's check failing
        (its holder file cannot be made, and the other instance, not knowing this one, writes)
        is a standby with the reason in /readyz, asked again at every standby check."""
        check = getattr(self.plugin, "superseded", None)
        newer = blind = None
        if check is not None:
            try:
                newer = check()
            except Exception as exc:
                blind = ("cannot tell whether this instance is the node's one writer: "
                         f"{getattr(exc, 'strerror', None) or exc}; writing nothing the node "
                         "shows until it can")
                if blind != self._blind:
                    log.error("%s (the slice, the Machine's status, the claims' CDI specs)",
                              blind, exc_info=not isinstance(exc, OSError))
        was_blind, self._blind = self._blind, blind
        if blind is not None:
            self._standby = blind
            return True
        if was_blind is not None and newer is None:
            log.warning("this instance can tell again that it is the newest: it writes the "
                        "slice, the Machine's status and the claims' CDI specs")
            self._standby = None
        elif newer != self._standby:
            if newer is not None:
                log.info("a newer instance runs on this node (%s): it writes the slice, the "
                         "Machine's status and the claims' CDI specs; this one stands by until "
                         "it ends", newer)
            else:
                log.info("no newer instance runs any more: this one writes the slice, the "
                         "Machine's status and the claims' CDI specs again")
            self._standby = newer
        return newer is not None

    def _serio_waiting(self) -> bool:
        side = self.machine_side
        try:
            return side is not None and bool(side.waiting_for_release())
        except Exception:  # a side without the question (a test's stand-in) waits for quiet
            return False

    @staticmethod
    def _due(side: Publisher | Reporter, now: float) -> bool:
        wait = side.retry_in(now)
        return wait is not None and wait <= 0

    def _walk(self, reason: WalkReason) -> None:
        """Walk, then hand the walk on: publishers, the plugin, the machine side, the Machine."""
        spec = self.machine_spec()
        self._walked_spec = spec
        started = time.perf_counter()
        seen, stamp = self._uevents_seen, facts_stamp(self.config.sources.facts)
        claimed = self.claimed()
        try:
            snapshot = self.config.sources.snapshot()  # the machine side reads it too
            inv = self.config.sources.walk(spec, claimed=claimed, snapshot=snapshot)
        except InputError as exc:  # the tree stopped being a sysfs tree: one line, no traceback
            self.metrics.walk_errors.inc()
            log.error("walk failed: %s", exc)
            return
        except Exception:
            self.metrics.walk_errors.inc()
            log.exception("walk failed")
            return
        self.metrics.walk_seconds.observe(time.perf_counter() - started)
        self.metrics.walks.labels(reason=reason).inc()
        self.walks += 1
        self.inventory = inv
        self._last_walk = (inv, seen, stamp, spec, claimed)
        self._cap(inv)
        self._publish(devices_json(inv))
        if self._standby is None:  # as _publish found it, a moment ago
            self._reconcile(inv)
        self._report(inv, spec, self._machine_side_fragment(spec, snapshot))

    def _reconcile(self, inv: Inventory) -> None:
        if self.plugin is not None:
            try:
                self.plugin.reconcile(inv)
            except Exception:
                log.exception("the plugin's reconcile pass failed")

    def _publish(self, devices: list[dict[str, Any]]) -> None:
        """The walk's devices to each publisher; one that fails keeps none from the others."""
        standby = self._superseded()
        for publisher in self.publishers:
            try:
                publisher.set_devices(devices)
                if not standby:
                    publisher.sync()
            except Exception:
                log.exception("publishing failed")

    def _machine_side_fragment(self, spec: MachineSpec, snapshot: Snapshot) -> dict[str, Any]:
        """The machine side applied to the walk's snapshot: the Machine status's fragment, with
        the ``SpecValid`` condition."""
        fragment = None
        if self.machine_side is not None:
            try:
                fragment = self.machine_side.apply(spec, snapshot)
            except Exception:
                log.exception("the machine side failed")
        fragment = dict(fragment or {})
        fragment["conditions"] = [*fragment.get("conditions", []),
                                  spec_condition(self.spec_error())]
        return fragment

    def _cap(self, inv: Inventory) -> None:
        """Past 128 devices, print the count on the console, once (rules: limits.cap)."""
        self.metrics.overflow.set(len(inv.overflow))
        if not inv.overflow:
            self._overflow_said = None
            return
        if self._overflow_said == inv.total:
            return
        self._overflow_said = inv.total
        line = (f"liken-devices: node {self.config.node} has {inv.total} devices; its "
                f"ResourceSlice holds {len(inv.devices)}, so {len(inv.overflow)} cannot be "
                f"claimed: {', '.join(inv.overflow[:8])}"
                f"{', ...' if len(inv.overflow) > 8 else ''}")
        log.warning("%s", line)
        console = self.config.console
        if console is None:
            return
        try:
            fd = os.open(console, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_APPEND
                         | os.O_CREAT, 0o644)
            try:
                os.write(fd, (line + "\n").encode())
            finally:
                os.close(fd)
        except OSError as exc:
            log.error("cannot write to the console %s: %s", console, exc)

    def _report(self, inv: Inventory, spec: MachineSpec, fragment: dict[str, Any]) -> None:
        """The Machine's status after a walk told ``spec``: to the API server, and the file."""
        if self.reporter is not None:
            try:
                self.reporter.set_status(inv, fragment)
                if self._standby is None:  # as _publish found it, a moment ago
                    self.reporter.sync()
            except Exception:
                log.exception("reporting the Machine failed")
            if self.reporter.spec != spec:  # read meanwhile (after an outage): walk with it
                self.wake(Wake.MACHINE_SPEC)
        self._offline_status_write(inv, fragment)

    def _offline_status_write(self, inv: Inventory, fragment: dict[str, Any] | None) -> None:
        out = self.config.status_out
        if out is None:
            return

        status = build_status(inv, fragment, self._offline_status, None)
        if status == self._offline_status:
            return
        try:
            write_atomic(out, json.dumps(status, indent=2, sort_keys=True).encode() + b"\n",
                         mode=0o644)
        except OSError as exc:
            log.error("cannot write %s: %s", out, exc)
            return
        self._offline_status = status

    def _shutdown(self, uevents: UeventSocket) -> None:
        for watch in self._watches:
            with contextlib.suppress(Exception):
                watch.stop()
        if self.plugin is not None:
            try:
                self.plugin.stop()
            except Exception:
                log.exception("stopping the plugin")
        self._uevent_fd = None  # its number may be reused once closed: prepare walks again
        uevents.close()
        with self._pipe_lock:
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_r = self._wake_w = -1
        if not self.release_lines_at_exit:
            self.release_lines()
        log.info("stopped")

    def release_lines(self) -> None:
        """Release the serial lines the machine side holds. An agent releases them as late as it
        can (rules: serial.across-restarts): ``run`` does so at its exit, after the
        servers stopped, so a surge upgrade's new instance waits the least time without them."""
        side, self.machine_side = self.machine_side, None
        if side is not None:
            try:
                side.close()
            except Exception:
                log.exception("closing the machine side")
