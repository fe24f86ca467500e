"""``liken-media run``: query at start, publish, and query again only for new render nodes.

rules: media.query-once, media.one-per-render-node. Each render node is asked once: at the pod's
start, or when liken first publishes it; a new driver only comes with a new image, hence a new
pod, and no timer asks again. So the agent watches the node's ``<node>-liken.sh`` slice and,
when it names a render node the agent has not seen (or drops one), walks liken's inventory again
(the same :class:`~liken_devices.inventory.Sources` walk, never another way through sysfs),
queries only the render nodes it has not seen, and republishes ``<node>-media.liken.sh``. It
also watches its own slice, so the slice comes back when the kubelet deletes it (KEP-4381),
without asking any driver again. The only wake-ups are watch events and the publisher's and the
evictor's retries after an API failure.

rules: media.missing-render-node. The render nodes reach the pod through its claim, allocated
when the pod was created, so a render node liken publishes later is not in the container. Its
device is published as a failed query (every capability false, no ``vaDriver``), one line names
the node and says a new pod is needed, and the agent evicts its own pod through the Eviction API
(a disruption budget is honoured), so the DaemonSet's next pod claims every render node.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from .. import heap, signals
from ..inventory.model import PublishedDevice
from ..inventory.sources import Sources
from ..kube.watch import Watch
from ..slices.publish import Publisher  # kube.SlicePublisher, as the node agent's is
from .devices import (
    NAMED,
    PCI_BUS_ID,
    MediaDevice,
    query_devices,
    render_devices,
    render_node_path,
)
from .probe import DEFAULT_TIMEOUT, ProbeResult

log = logging.getLogger("liken_devices.media")

NOT_IN_POD = "not in this pod (liken published it after the pod's claim was allocated)"
STUCK_AFTER = 120.0  # seconds one pass may take before the agent counts as wedged


class Evictor(Protocol):
    """What the agent needs of ``kube.evict.PodEvictor``."""

    namespace: str
    name: str

    def request(self) -> None: ...

    def due(self, now: float | None = None) -> bool: ...

    def attempt(self) -> bool: ...

    def retry_in(self, now: float | None = None) -> float | None: ...


class Metrics(Protocol):
    """What the agent reports (``media.metrics.MediaMetrics``)."""

    def queried(self, result: str, seconds: float | None = None) -> None: ...

    def set_missing(self, count: int) -> None: ...


class _NoMetrics:
    def queried(self, result: str, seconds: float | None = None) -> None:
        pass

    def set_missing(self, count: int) -> None:
        pass


def liken_render_names(obj: Mapping[str, Any] | None) -> frozenset[str]:
    """The render devices a ``liken.sh`` slice lists (``renderNode: true``)."""
    devices = ((obj or {}).get("spec") or {}).get("devices") or []
    names = set()
    for d in devices:
        attr = (d.get("attributes") or {}).get("renderNode") or {}
        if attr.get("bool") is True and isinstance(d.get("name"), str):
            names.add(d["name"])
    return frozenset(names)


def liken_render_names_by_bus(obj: Mapping[str, Any] | None) -> dict[str, dict[str, str]]:
    """The five :data:`~.devices.NAMED` attributes of each render device a ``liken.sh`` slice
    lists, by its pciBusID (by its name when it has none: a USB GPU)."""
    devices = ((obj or {}).get("spec") or {}).get("devices") or []
    out: dict[str, dict[str, str]] = {}
    for d in devices:
        attrs = d.get("attributes") or {}
        if not isinstance(attrs, dict) or (attrs.get("renderNode") or {}).get("bool") is not True:
            continue
        values = {k: v["string"] for k in NAMED
                  if isinstance(v := attrs.get(k), dict) and isinstance(v.get("string"), str)}
        bus = (attrs.get(PCI_BUS_ID) or {}).get("string")
        key = bus if isinstance(bus, str) else d.get("name")
        if isinstance(key, str):
            out[key] = values
    return out


class MediaAgent:
    """The agent's state: the render nodes it has asked, and the slice it keeps published."""

    def __init__(self, sources: Sources, publisher: Publisher, dev_root: Path = Path("/dev"),
                 timeout: float = DEFAULT_TIMEOUT, env: Mapping[str, str] | None = None,
                 command: Sequence[str] | None = None, evictor: Evictor | None = None,
                 metrics: Metrics | None = None) -> None:
        self.sources = sources
        self.publisher = publisher
        self.dev_root = dev_root
        self.timeout = timeout
        self.env = env
        self.command = command
        self.evictor = evictor
        self.metrics: Metrics = metrics or _NoMetrics()
        self.known: dict[str, MediaDevice] = {}
        self.missing: set[str] = set()  # render devices liken publishes that this pod lacks
        self.queried: list[str] = []  # every render device asked, in order (one entry per query)
        self.walks = 0
        self.turns = 0
        self.ready = threading.Event()  # set once the first answers are published
        self.endpoint_port: int | None = None  # where /metrics and the probes are served
        self._pass_started: float | None = None
        self._stopping = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._recheck = False  # liken's slice names render nodes other than the known ones
        # The render devices' names as liken's slice gives them (the host's hwdata), by
        # pciBusID; None until the slice is seen (then the agent's own walk names them).
        self._liken_names: dict[str, dict[str, str]] | None = None
        self._republish = False

    # ---- what the watches report (watch threads) ------------------------------------------

    def on_liken_slice(self, event: str, obj: dict[str, Any] | None) -> None:
        """An event of ``<node>-liken.sh``: recheck when its render nodes are not ours."""
        if event == "DELETED":
            return  # the kubelet wiped it; liken writes it again, and then we look
        if obj is not None:
            named = liken_render_names_by_bus(obj)
            with self._lock:
                if named != self._liken_names:
                    self._liken_names = named
                    self._republish = True
                    self._wake.set()
        if event != "RESYNC" and obj is not None:
            names = liken_render_names(obj)
            with self._lock:
                if names == frozenset(self.known):
                    return
        with self._lock:
            self._recheck = True
        self._wake.set()

    def on_own_slice(self, event: str, obj: dict[str, Any] | None) -> None:
        if self.publisher.observe(event, obj):
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    # ---- what the probes ask (the endpoint's thread) -----------------------------------------

    def health(self) -> tuple[bool, str]:
        """/healthz: the loop turned recently (asleep waiting for work, or in a young pass)."""
        if not self.ready.is_set():
            return False, "starting: the first queries have not been published"
        if self._stopping:
            return False, "stopping"
        started = self._pass_started
        if started is not None and time.monotonic() - started > STUCK_AFTER:
            return False, f"a pass of the loop has been running for over {STUCK_AFTER:g} s"
        return True, f"ok: {len(self.queried)} render nodes asked, {self.turns} turns"

    def readiness(self) -> tuple[bool, str]:
        """/readyz: the first queries answered and the slice written."""
        if not self.ready.is_set():
            return False, "the first queries have not been published"
        if not (self.publisher.writes or self.publisher.converged):
            return False, "the media slice is not written yet"
        return True, "ok"

    # ---- the work (main thread) ----------------------------------------------------------------

    def refresh(self) -> None:
        """Walk liken's inventory; ask only render nodes not seen yet; set the desired slice."""
        inventory = self.sources.walk()
        self.walks += 1
        renders = {d.name: d for d in render_devices(inventory)}
        with self._lock:
            gone = sorted(set(self.known) - set(renders))
            new = [d for name, d in renders.items() if name not in self.known]
        for name in gone:
            log.info("render node %s is gone: its media device is withdrawn", name)
        absent = [d for d in new if not self._in_pod(d)]
        asked = [d for d in new if d not in absent]
        # Outside the lock: the queries take up to the timeout, while the watches keep running.
        started = time.monotonic()
        answers = query_devices(asked, self.dev_root, self.timeout, self.env, self.command) \
            if asked else []
        for media in answers:
            self.metrics.queried("ok" if media.result.ok else "failed",
                                 media.result.seconds or time.monotonic() - started)
        answers += [self._not_in_pod(d) for d in absent]
        with self._lock:
            for name in gone:
                self.known.pop(name, None)
                self.missing.discard(name)
            for media in answers:
                self.known[media.name] = media
                self.queried.append(media.name)
            self.missing.update(d.name for d in absent)
            devices = self._devices_locked()
            missing = len(self.missing)
        self.metrics.set_missing(missing)
        self.publisher.set_devices(devices)

    def _devices_locked(self) -> list[dict[str, Any]]:
        """The slice's devices, named as liken's slice names their render nodes when it has
        them (rules: media.names-as-render-node)."""
        self._republish = False
        out = []
        for m in sorted(self.known.values(), key=lambda m: m.name):
            names = None
            if self._liken_names is not None:
                bus = m.render.attributes.get(PCI_BUS_ID)
                names = self._liken_names.get(bus if isinstance(bus, str) else m.name)
            out.append(m.to_api(names))
        return out

    def _in_pod(self, device: PublishedDevice) -> bool:
        path = render_node_path(device, self.dev_root)
        return path is not None and os.path.exists(path)

    def _not_in_pod(self, device: PublishedDevice) -> MediaDevice:
        """A render node this pod's claim lacks: a failed query, said once, and a new pod."""
        path = render_node_path(device, self.dev_root) or "-"
        media = MediaDevice(device, path, ProbeResult(path, None, NOT_IN_POD))
        self.metrics.queried("missing")
        log.info("%s", media.log_line)
        if self.evictor is not None:
            log.warning("render node %s (%s) is not in this pod: a new pod is needed; evicting "
                        "pod %s/%s so the DaemonSet's next pod claims it", device.name, path,
                        self.evictor.namespace, self.evictor.name)
            self.evictor.request()
        else:
            log.warning("render node %s (%s) is not in this pod: a new pod is needed (the pod's "
                        "name is unknown: set POD_NAME and POD_NAMESPACE to evict it)",
                        device.name, path)
        return media

    def run(self, stop: threading.Event, watches: Sequence[Watch] = ()) -> None:
        """Ask at start, publish, then act on watch events until ``stop`` is set."""
        self._pass_started = time.monotonic()
        self.refresh()
        self.publisher.sync()
        self._pass_started = None
        heap.settle()
        self.ready.set()
        for w in watches:
            w.start()
        try:
            while not stop.is_set():
                self._turn()
                # No timer: sleep until a watch event, a stop, or a retry falls due.
                signals.wait(self._wake, self._timeout())
                self._wake.clear()
        finally:
            self._stopping = True
            for w in watches:
                w.stop()

    def _turn(self) -> None:
        self._pass_started = time.monotonic()
        try:
            with self._lock:
                recheck, self._recheck = self._recheck, False
                devices = self._devices_locked() if self._republish and not recheck else None
            if recheck:
                self.refresh()
            elif devices is not None:
                self.publisher.set_devices(devices)
            self.publisher.sync()
            # The failed devices are published first; then the pod asks to be replaced.
            if self.evictor is not None and self.evictor.due():
                self.evictor.attempt()
        finally:
            self._pass_started = None
            self.turns += 1

    def _timeout(self) -> float | None:
        waits = [self.publisher.retry_in()]
        if self.evictor is not None and self.evictor.due():
            waits.append(0.0)
        elif self.evictor is not None:
            waits.append(self.evictor.retry_in())
        known = [w for w in waits if w is not None]
        return min(known) if known else None
