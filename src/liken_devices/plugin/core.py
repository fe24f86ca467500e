"""The kubelet plugin's logic: prepare, unprepare, reconcile, health — without the wire.

Every rule here is in docs/rules/ (delivery.md, usb.md, bluetooth.md, serial.md, and the storage
rule of hardware.md) or comes from the kubelet's DRA plugin API (KEP-4381; the Go helper
``k8s.io/dynamic-resource-allocation/kubeletplugin`` shows its semantics):

* Prepare reads each claim from the API before taking the lock, then resolves every device
  against a fresh walk under the lock: a device the inventory does not offer now fails that claim
  in band. That one rule covers an unplugged device, an adapter's bare name that ``spec.serio``
  now reserves, and the storage recheck (the inventory never publishes a disk that backs a role,
  so an allocation from an older slice cannot deliver one). A claim that is already prepared is
  prepared again idempotently, keeping the nonexistent path of a device that is away
  (rules: delivery.nodes-only, delivery.fresh-walk, serial.bare-name-claim).
* Every walk knows the prepared claims (:meth:`Plugin.claimed`), because they shape what is
  published: a claimed USB device keeps its shape until its claim ends, and the 128 cap keeps
  what is claimed (rules: usb.claimed-keeps-shape, limits.cap-keeps-claimed). A device the
  walk keeps for its claim without publishing it (``Inventory.held``) resolves as present.
* The state is saved before the spec is written and the spec deleted before the state forgets the
  claim, so no spec exists that the plugin does not know how to remove.
* Unprepare gives the claim's USB interfaces back to the kernel (rules: usb.rebind),
  deletes the spec and forgets the claim; a claim it never saw, or whose spec is gone, succeeds.
  Then it asks for a walk (``on_release``): the next walk publishes what the kernel then shows.
* The reconcile pass, run after every walk, rewrites each prepared claim's spec with the current
  nodes and their host mode and owner (``cdi``), or with a nonexistent path while a device is
  away, touching only files that differ.
* The claim's ``status.devices`` says what its spec delivers (the ``/dev`` paths, the device's
  address and serial): asked for after each prepare and each pass that changes it, removed on
  unprepare, and written by a background writer (:mod:`.claimstatus`), never on the prepare's
  path to the kubelet (rules: delivery.claim-status).
* Health: each prepared device is healthy while present and unhealthy while absent; a Bluetooth
  device whose running container holds a number another device registered since is unhealthy
  until the kubelet records that container's restart after the spec without it was written (the
  pod's status, read from the API: :mod:`.late`; rules: bluetooth.late-registrant).
* A claim rebuilt from its CDI spec (the state file was lost) is checked against the API once
  the kubelet had ``rebuilt_grace`` seconds of serving to unprepare it: when the API no longer
  knows it (gone, replaced under another UID, its name unknown), or it is not allocated on this
  node, it is dropped as an unprepare would, with one log line. A stale or planted spec cannot
  keep a device claimed for ever; an API that cannot be reached keeps the claim and asks again.

Calls are serialized by one lock (the Go helper's default), which reconcile takes too.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..inventory.limits import DRIVER
from ..inventory.model import Claimed, Inventory, LeftOut, PublishedDevice
from ..sysfs.model import DevNode
from . import cdi, late, usb
from .cdi import Delivery, SpecError
from .claimref import ClaimRef
from .claims import ClaimError, KubeClient, container_starts, fetch_results
from .claimstatus import ClaimStatusWriter, device_entries, stable_facts
from .late import merge_started, started_events
from .paths import DEFAULT_CDI_DIR, DEFAULT_PLUGIN_DIR, DEFAULT_REGISTRY_DIR, DEFAULT_STATE_DIR
from .state import PreparedClaim, PreparedDevice, StateLockTimeout, StateStore, claimed_by

log = logging.getLogger(__name__)

FETCH_WORKERS = 8  # concurrent claim GETs in one prepare call


@dataclass(frozen=True, slots=True)
class PluginConfig:
    """Where the plugin reads and writes; every path is an option so tests pass their own."""

    node: str  # the node's name = the pool name of its slice
    cdi_dir: Path = DEFAULT_CDI_DIR
    state_dir: Path = DEFAULT_STATE_DIR
    plugin_dir: Path = DEFAULT_PLUGIN_DIR  # holds dra.sock (the kubelet's plugin directory)
    registry_dir: Path = DEFAULT_REGISTRY_DIR  # holds liken.sh-reg.sock
    # The host's device nodes as this process sees them: each spec carries their mode and owner.
    dev_dir: Path = cdi.DEV_DIR
    # The real sysfs the walk reads, for the USB interfaces (drivers_probe); None when the
    # devices come from a recording, so nothing is ever written to this machine's /sys for them.
    sysfs: Path | None = Path("/sys")
    # Remove liken.sh specs in the CDI dir that the state does not know (a crash mid-prepare).
    sweep_orphans: bool = True
    health_interval: float = 10.0  # seconds between full health messages without a change
    grpc_workers: int = 8
    fetch_budget: float = 30.0  # seconds for reading a call's claims (the kubelet waits 45 s)
    # Seconds of serving the kubelet has to unprepare a claim rebuilt from its spec before the
    # API is asked whether it still exists (the kubelet retries an unprepare on its sync loop).
    rebuilt_grace: float = 120.0
    rebuilt_retry: float = 30.0  # seconds between checks while the API cannot be reached
    # Seamless upgrade (docs/plugin.md, "Upgrades"): the pod's UID names this instance's
    # sockets, and the state lock is shared by the old and the new instance. None: the default
    # mode, one instance per node.
    pod_uid: str | None = None

    @property
    def seamless(self) -> bool:
        return self.pod_uid is not None

    @property
    def dra_socket(self) -> Path:
        if self.pod_uid is None:
            return self.plugin_dir / "dra.sock"
        return _fitting(self.plugin_dir, "dra-{}.sock", self.pod_uid)

    @property
    def registration_socket(self) -> Path:
        if self.pod_uid is None:
            return self.registry_dir / f"{DRIVER}-reg.sock"
        return _fitting(self.registry_dir, DRIVER + "-{}-reg.sock", self.pod_uid)


UNIX_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL


def _fitting(directory: Path, pattern: str, pod_uid: str) -> Path:
    """A socket name unique to the pod: its UID, or a hash of it where the path would not fit
    in a unix socket address."""
    path = directory / pattern.format(pod_uid)
    if len(os.fsencode(str(path))) <= UNIX_PATH_MAX:
        return path
    return directory / pattern.format(hashlib.sha256(pod_uid.encode()).hexdigest()[:16])


@dataclass(frozen=True, slots=True)
class PreparedDeviceResult:
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class PrepareOutcome:
    devices: tuple[PreparedDeviceResult, ...] = ()
    error: str = ""


# A prepared device is healthy while present, unhealthy while away (rules: delivery.health).
@dataclass(frozen=True, slots=True)
class DeviceHealthState:
    pool: str
    device: str
    healthy: bool
    message: str = ""  # why, for the kubelet's health stream ("" : present or absent)


@dataclass(slots=True)
class _Health:
    cond: threading.Condition = field(default_factory=threading.Condition)
    version: int = 0
    devices: tuple[DeviceHealthState, ...] = ()


class Walk(Protocol):
    """A fresh walk of the node's hardware, shaped by the claims prepared on it."""

    def __call__(self, *, claimed: Claimed) -> Inventory: ...


class PluginMetrics(Protocol):
    """What the plugin reports per kubelet request: claim UID -> error ("" = done), seconds."""

    def prepared(self, errors: dict[str, str], seconds: float) -> None: ...

    def unprepared(self, errors: dict[str, str], seconds: float) -> None: ...

    def late_registrants(self, count: int) -> None: ...


class _NoMetrics:
    def prepared(self, errors: dict[str, str], seconds: float) -> None:
        pass

    def unprepared(self, errors: dict[str, str], seconds: float) -> None:
        pass

    def late_registrants(self, count: int) -> None:
        pass


class Plugin:
    """The liken.sh kubelet plugin. See the package docstring for how the agent embeds it.

    ``on_release`` is called (outside the lock, from the unpreparing thread) after an unprepare
    forgot a claim: the devices it held may publish differently now, so the embedder walks.
    """

    def __init__(self, config: PluginConfig, walk: Walk, kube_client: KubeClient | None,
                 metrics: PluginMetrics | None = None, *,
                 on_release: Callable[[], object] | None = None) -> None:
        self.config = config
        self._metrics: PluginMetrics = metrics or _NoMetrics()
        self._walk = walk
        self._kube = kube_client
        self.on_release = on_release
        self._lock = threading.Lock()
        self._state = StateStore(config.state_dir, config.cdi_dir, config.node,
                                 pod_uid=config.pod_uid)
        self._health = _Health()
        self._servers: Any = None
        self._stopping = threading.Event()
        self.registration: tuple[bool, str] | None = None  # last NotifyRegistrationStatus
        self._loaded = False
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._serving_since: float | None = None  # time.time() of the last start
        self._confirmed: set[str] = set()  # rebuilt claims the API confirmed
        self._checker: threading.Thread | None = None
        # (claim UID, Bluetooth device) -> the late registrants said in the log (late.py)
        self._late: dict[tuple[str, str], tuple[LeftOut, ...]] = {}
        # claim UID -> (when its spec's content was last written, as far as this instance knows,
        # and that content's key): a container started well after it holds the current set
        self._written: dict[str, tuple[float, object]] = {}
        # The claims' status.devices, written in the background (rules: delivery.claim-status);
        # device name -> its stable attributes as last walked, kept while the device is away.
        self.status: ClaimStatusWriter | None = \
            ClaimStatusWriter(kube_client) if kube_client is not None else None
        self._facts: dict[str, dict[str, Any]] = {}

    # -- lifecycle -------------------------------------------------------------------------------

    def load(self) -> None:
        """Take the state lock and read the state (idempotent); done by :meth:`start`, usable
        without serving. :class:`~.state.StateBusy` when another instance holds the lock."""
        with self._lock:
            if self._loaded:
                return
            self._state.acquire(shared=self.config.seamless)
            try:
                self._state.open(sweep_orphans=self.config.sweep_orphans)
            except BaseException:
                self._state.release()
                raise
            self._loaded = True
            self._update_health_locked()

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[str]:
        """This process's lock and the state's write lock, with the state as on disk; yields ""
        or, when the other instance of an upgrade held the write lock too long, why not."""
        with self._lock, contextlib.ExitStack() as stack:
            try:
                reread = stack.enter_context(self._state.transaction())
            except StateLockTimeout as e:
                yield str(e.strerror)
                return
            if reread:
                self._update_health_locked()
            yield ""

    def start(self) -> None:
        """Load the state, serve the DRA socket, then the registration socket (the kubelet may
        call as soon as it sees the registration)."""
        # deferred: the server imports this module (a cycle at the top); grpcio, 58 ms, loads
        # when the plugin starts (tests/test_layers.py)
        from .server import Servers

        self.load()
        self._stopping.clear()
        servers = Servers(self)
        with self._lock, self._state.write_lock():  # no other instance sweeps sockets meanwhile
            servers.start()
        self._servers = servers
        self._serving_since = time.time()
        if self.status is not None:
            self.status.start()
        self._watch_rebuilt()

    def stop(self) -> None:
        """Stop serving; both sockets are removed. The state and the specs stay."""
        self._stopping.set()
        with self._health.cond:
            self._health.cond.notify_all()
        if self._servers is not None:
            self._servers.stop()
            self._servers = None
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if self.status is not None:
            self.status.stop()
        checker, self._checker = self._checker, None
        if checker is not None:
            checker.join(10)
        self._serving_since = None
        with self._lock:
            self._state.release()
            self._loaded = False

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def superseded(self) -> str | None:
        """In a seamless upgrade, the newer instance beside this one (its holder's words), whose
        walk the node's API objects show; None when this instance is the newest or alone.
        :class:`~.state.HolderMissing` when it cannot tell: its holder file cannot be made, so
        the other instance does not know it runs (rules: limits.one-writer)."""
        return self._state.newer_instance()

    @property
    def registered(self) -> bool:
        """Whether the kubelet's last word on registration was "registered"."""
        return self.registration is not None and self.registration[0]

    # -- the kubelet's two requests, counted per claim -------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef], refused: Mapping[str, str] | None = None
                ) -> dict[str, PrepareOutcome]:
        """NodePrepareResources: one outcome per claim UID; errors in band (see ``_prepare``).

        ``refused``: the request's claims whose UID did not parse (``ClaimRef.parse``), the text
        the kubelet sent -> why; each fails in band."""
        refused = dict(refused or {})
        return _counted(claims, refused, lambda c: self._prepare(c, refused),
                        self._metrics.prepared, lambda out: {u: o.error for u, o in out.items()})

    def unprepare(self, claims: Sequence[ClaimRef], refused: Mapping[str, str] | None = None
                  ) -> dict[str, str]:
        """NodeUnprepareResources: claim UID -> error ("" = done). Unknown claims succeed, and
        so do the ``refused`` ones (as in :meth:`prepare`): no spec is named after them."""
        refused = dict(refused or {})
        return _counted(claims, refused, lambda c: self._unprepare(c, refused),
                        self._metrics.unprepared, lambda out: out)

    # -- prepare ---------------------------------------------------------------------------------

    def _prepare(self, claims: Sequence[ClaimRef], refused: Mapping[str, str]
                 ) -> dict[str, PrepareOutcome]:
        """NodePrepareResources: one outcome per claim UID; errors in band.

        The claims are read from the API concurrently and before the lock; under the lock one
        fresh walk (told the claims already prepared) resolves them all, the state is saved once
        with every resolved claim, and then each claim's spec is written.
        """
        self.load()
        out = {uid: PrepareOutcome(error=why) for uid, why in refused.items()}
        fetched: list[tuple[ClaimRef, list[Any]]] = []
        for c, got in zip(claims, self._fetch_all(claims), strict=True):
            if isinstance(got, str):
                out[c.uid] = PrepareOutcome(error=got)
            else:
                fetched.append((c, got))
        if not fetched:
            return out
        with self._exclusive() as busy:
            if busy:
                for c, _ in fetched:
                    out[c.uid] = PrepareOutcome(error=busy)
                return out
            try:
                # The claims being prepared count among the node's claims: a Bluetooth claim's
                # virtual event nodes depend on how many there are (rules: bluetooth.virtual-nodes).
                inv = self._walk(claimed=Claimed(self._claimed_locked().names, frozenset(
                    r.device for _, results in fetched for r in results)))
            except Exception as e:
                log.exception("walk for prepare failed")
                for c, _ in fetched:
                    out[c.uid] = PrepareOutcome(error=f"reading the node's devices: {e}")
                return out
            by_name = _by_name(inv)
            resolved: list[tuple[PreparedClaim, PreparedClaim | None, dict[str, object]]] = []
            for c, results in fetched:
                try:
                    claim = self._resolve(c, results, inv, by_name)
                    spec = cdi.build_spec(c.uid, _deliveries(claim), self.config.dev_dir)
                except (ClaimError, SpecError) as e:
                    out[c.uid] = PrepareOutcome(error=str(e))
                    continue
                except Exception as e:  # a bug must not take the other claims down
                    log.exception("prepare %s", c.uid)
                    out[c.uid] = PrepareOutcome(error=f"internal error: {e!r}")
                    continue
                # The container that starts now gets these numbers, and one that runs already
                # (a claim prepared again at the kubelet's restart) keeps what it has
                # (rules: bluetooth.late-registrant).
                old = self._state.claims.get(c.uid)
                claim.started = merge_started(old.started if old else {}, started_events(
                    claim.nodes) if all(claim.present.get(n, False)
                                        for n in claim.device_names()) else {})
                resolved.append((claim, self._state.claims.get(c.uid), spec))
                self._state.claims[c.uid] = claim
            if resolved:
                self._write_prepared(resolved, out)
                self._note_facts(by_name)
                for claim, _, _ in resolved:
                    if not out[claim.uid].error:
                        self._want_status(claim)
            self._update_health_locked()
        return out

    def _note_facts(self, by_name: dict[str, PublishedDevice]) -> None:
        """Keep the stable attributes of the claimed devices the walk found."""
        for claim in self._state.claims.values():
            for n in claim.device_names():
                if n in by_name:
                    self._facts[n] = stable_facts(by_name[n].attributes)

    def _want_status(self, claim: PreparedClaim) -> None:
        """Ask for the claim's status.devices as its spec now delivers; the writer applies
        it in the background (rules: delivery.claim-status)."""
        if self.status is not None:
            self.status.want(claim.uid, claim.namespace, claim.name,
                             device_entries(claim, self._facts))

    def _fetch_all(self, claims: Sequence[ClaimRef]) -> list[list[Any] | str]:
        """Each claim's results for this node, or the error text.

        The GETs run concurrently, and the whole reading has a budget well inside the kubelet's
        45 s per call: a claim the API has not answered by then fails in band
        instead of the whole call timing out.
        """
        def one(c: ClaimRef) -> list[Any] | str:
            try:
                if self._kube is None:
                    raise ClaimError("the plugin has no API client to read the claim")
                return fetch_results(self._kube, c.namespace, c.name, c.uid, self.config.node)
            except ClaimError as e:
                return str(e)
            except Exception as e:  # a bug must not take the other claims down
                log.exception("reading claim %s", c.uid)
                return f"internal error reading the claim: {e!r}"

        if not claims:
            return []
        pool = self._fetch_pool()  # kept between calls: no thread is started per call
        futures = [pool.submit(one, c) for c in claims]
        wait(futures, timeout=self.config.fetch_budget)
        for f in futures:
            f.cancel()  # a GET still queued past the budget is not made at all
        return [f.result() if f.done() and not f.cancelled() else
                f"reading ResourceClaim {c.namespace}/{c.name}: no answer from the API "
                f"within {self.config.fetch_budget:g} s"
                for c, f in zip(claims, futures, strict=True)]

    def _fetch_pool(self) -> ThreadPoolExecutor:
        """The threads that read a call's claims concurrently, kept between calls."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=FETCH_WORKERS,
                                                thread_name_prefix="claim-get")
            return self._pool

    def _write_prepared(self, resolved: list[tuple[PreparedClaim, PreparedClaim | None,
                                                   dict[str, object]]],
                        out: dict[str, PrepareOutcome]) -> None:
        """State first (no spec the state does not know), then the specs."""
        try:
            self._state.save()
        except OSError as e:
            for claim, existing, _ in resolved:
                self._restore(claim.uid, existing)
                out[claim.uid] = PrepareOutcome(error=f"saving the plugin state: {e}")
            return
        failed = False
        for claim, existing, spec in resolved:
            try:
                cdi.write_spec(self.config.cdi_dir, claim.uid, spec)
            except OSError as e:
                failed = True
                self._restore(claim.uid, existing)
                if existing is None:
                    with contextlib.suppress(OSError):  # a half-made file must not stay
                        cdi.remove_spec(self.config.cdi_dir, claim.uid)
                out[claim.uid] = PrepareOutcome(error=f"writing the CDI spec: {e}")
                continue
            self._written_at(claim.uid, claim)
            try:
                self._state.remember_name(claim.uid, claim.namespace, claim.name)
            except OSError as e:  # only a later rebuild needs it: it would drop the claim
                log.error("cannot keep the name of claim %s: %s", claim.uid, e)
            out[claim.uid] = PrepareOutcome(devices=tuple(
                PreparedDeviceResult(tuple(d.requests), self.config.node, d.name,
                                     (cdi.cdi_id(claim.uid, d.name),), d.share_id)
                for d in claim.devices))
        if failed:
            try:
                self._state.save()
            except OSError as e:
                log.error("saving the plugin state after a failed prepare: %s", e)

    def _restore(self, uid: str, existing: PreparedClaim | None) -> None:
        if existing is None:
            self._state.claims.pop(uid, None)
        else:
            self._state.claims[uid] = existing

    def _resolve(self, c: ClaimRef, results: Sequence[Any], inv: Inventory,
                 by_name: dict[str, PublishedDevice]) -> PreparedClaim:
        """The claim as the fresh walk delivers it, or :class:`ClaimError`."""
        existing = self._state.claims.get(c.uid)
        names = sorted({r.device for r in results})
        for n in names:
            cdi.check_device(n)
        nodes: dict[str, list[DevNode]] = {}
        present: dict[str, bool] = {}
        interfaces: set[str] = set(existing.usb_interfaces) if existing else set()
        for n in names:
            now = inv.lookup(n)
            if now:
                nodes[n] = list(now)
                present[n] = True
                source = _source(by_name, n)
                interfaces.update(usb.interfaces_for(self.config.sysfs, source, now))
            elif existing is not None and existing.nodes.get(n):
                # Prepared before and away now: keep the nonexistent path: the container fails to
                # start until the hardware returns (rules: delivery.absent-node).
                nodes[n] = existing.nodes[n]
                present[n] = False
            elif now is None:
                raise ClaimError(
                    f"device {n} is not offered by node {self.config.node} now: it is "
                    "unplugged, or no longer published (a disk that backs a storage role, a "
                    "serial line that spec.serio reserves, a device past the cap)")
            else:
                raise ClaimError(f"device {n} delivers no device node")
        devices: dict[tuple[str, str], PreparedDevice] = {}
        for r in results:
            key = (r.device, r.share_id or "")
            d = devices.setdefault(key, PreparedDevice(r.device, [], r.share_id))
            if r.request and r.request not in d.requests:
                d.requests.append(r.request)
        return PreparedClaim(uid=c.uid, namespace=c.namespace, name=c.name,
                             pool=self.config.node, devices=list(devices.values()),
                             nodes=nodes, present=present, usb_interfaces=sorted(interfaces),
                             prepared_at=existing.prepared_at if existing else time.time())

    # -- unprepare -------------------------------------------------------------------------------

    def _unprepare(self, claims: Sequence[ClaimRef], refused: Mapping[str, str]
                   ) -> dict[str, str]:
        self.load()
        with self._exclusive() as busy:
            if busy:
                return {uid: busy for uid in refused} | {c.uid: busy for c in claims}
            out = dict.fromkeys(refused, "")  # no spec can exist under a name that is not a UID
            before = set(self._state.claims)
            for c in claims:
                try:
                    self._forget_locked(c.uid)
                    out[c.uid] = ""
                except OSError as e:
                    out[c.uid] = f"unpreparing claim {c.uid}: {e}"
            released = before != set(self._state.claims)
            self._update_health_locked()
        if released and self.on_release is not None:
            try:
                self.on_release()
            except Exception:
                log.exception("asking for a walk after unprepare")
        return out

    def _forget_locked(self, uid: str) -> None:
        """End one claim: its USB interfaces back to the kernel, its spec deleted, the state
        saved without it (OSError when it could not be)."""
        claim = self._state.claims.get(uid)
        if claim is not None:
            others = {i for u, o in self._state.claims.items() if u != uid
                      for i in o.usb_interfaces}
            usb.reprobe(self.config.sysfs, [i for i in claim.usb_interfaces if i not in others])
        cdi.remove_spec(self.config.cdi_dir, uid)
        if claim is not None:
            del self._state.claims[uid]
            try:
                self._state.save()
            except OSError:
                # Still on disk: keep it in memory too, so the kubelet's retry saves
                # again and a restart cannot bring the spec back through reconcile.
                self._state.claims[uid] = claim
                raise
            if self.status is not None:  # its entries go with it (rules: delivery.claim-status)
                self.status.forget(uid, claim.namespace, claim.name)
        with contextlib.suppress(OSError):
            self._state.forget_name(uid)
        self._confirmed.discard(uid)

    # -- claims rebuilt from their specs ---------------------------------------------------------

    def _watch_rebuilt(self) -> None:
        """Start the checker of rebuilt claims when there are any and none runs."""
        if self._kube is None or (self._checker is not None and self._checker.is_alive()):
            return
        with self._lock:
            if not self._unconfirmed_locked():
                return
        self._checker = threading.Thread(target=self._check_rebuilt_loop,
                                         name="liken-rebuilt-claims", daemon=True)
        self._checker.start()

    def _unconfirmed_locked(self) -> list[PreparedClaim]:
        return [c for u, c in sorted(self._state.claims.items())
                if c.rebuilt and u not in self._confirmed]

    def _check_rebuilt_loop(self) -> None:
        while not self._stopping.is_set():
            wait = self.check_rebuilt()
            if wait is None:
                return
            self._stopping.wait(wait)

    def check_rebuilt(self, now: float | None = None) -> float | None:
        """One pass over the rebuilt claims that are due: each the API does not know (or not
        for this node) is dropped. Returns the seconds until the next pass is due, None when no
        rebuilt claim is left to check."""
        since = self._serving_since
        if self._kube is None or since is None:
            return None
        now = time.time() if now is None else now
        with self._lock:
            waiting = self._unconfirmed_locked()
        if not waiting:
            return None
        due = [c for c in waiting
               if now - max(c.prepared_at, since) >= self.config.rebuilt_grace]
        verdicts: dict[str, str] = {}
        retry = False
        for c in due:
            why = self._unknown_to_api(c)
            if why is None:
                self._confirmed.add(c.uid)
            elif why:
                verdicts[c.uid] = why
            else:
                retry = True
        if verdicts:
            self._drop_rebuilt(verdicts)
        with self._lock:
            left = self._unconfirmed_locked()
        if not left:
            return None
        untimed = [self.config.rebuilt_grace - (now - max(c.prepared_at, since)) for c in left
                   if c.uid not in {d.uid for d in due}]
        nexts = [*untimed, *([self.config.rebuilt_retry] if retry or not untimed else [])]
        return max(min(nexts), 0.05)

    def _unknown_to_api(self, claim: PreparedClaim) -> str | None:
        """Why the API does not know ``claim`` for this node; None when it does; "" when the API
        could not say (ask again later)."""
        if not claim.name:
            return "its namespace and name were lost with the state, so the API cannot know it"
        assert self._kube is not None
        try:
            fetch_results(self._kube, claim.namespace, claim.name, claim.uid, self.config.node)
        except ClaimError as e:
            if e.transient:
                log.info("claim %s rebuilt from its CDI spec: checking it later (%s)", claim.uid,
                         e)
                return ""
            return str(e)
        return None

    def _drop_rebuilt(self, verdicts: dict[str, str]) -> None:
        dropped = False
        with self._exclusive() as busy:
            if busy:
                log.warning("rebuilt claims not dropped now: %s", busy)
                return
            for uid, why in sorted(verdicts.items()):
                claim = self._state.claims.get(uid)
                if claim is None or not claim.rebuilt:
                    continue  # unprepared, or prepared again, meanwhile
                try:
                    self._forget_locked(uid)
                except OSError as e:
                    log.error("cannot drop claim %s: %s", uid, e)
                    continue
                dropped = True
                log.warning("dropped claim %s%s, rebuilt from its CDI spec: the kubelet did not "
                            "unprepare it within %g s of serving and %s", uid,
                            f" ({claim.namespace}/{claim.name})" if claim.name else "",
                            self.config.rebuilt_grace, why)
            self._update_health_locked()
        if dropped and self.on_release is not None:
            try:
                self.on_release()
            except Exception:
                log.exception("asking for a walk after dropping rebuilt claims")

    # -- reconcile -------------------------------------------------------------------------------

    def reconcile(self, inv: Inventory) -> list[str]:
        """Rewrite every prepared claim's spec for ``inv``; returns the UIDs whose file changed.

        rules: delivery.reconcile, delivery.absent-node
        """
        self.load()
        written: list[str] = []
        with self._exclusive() as busy:
            if busy:
                log.error("reconcile skipped: %s", busy)
                return written
            by_name = _by_name(inv)
            self._note_facts(by_name)
            dirty = False
            for uid, claim in sorted(self._state.claims.items()):
                try:
                    self._note_late(uid, claim, late.late_registrants(claim.started, inv))
                    for n in claim.device_names():
                        now = inv.lookup(n)
                        is_present = bool(now)
                        if now and list(now) != claim.nodes.get(n):
                            claim.nodes[n] = list(now)
                            source = _source(by_name, n)
                            more = set(usb.interfaces_for(self.config.sysfs, source, now))
                            claim.usb_interfaces = sorted(more | set(claim.usb_interfaces))
                            dirty = True
                        elif now and claim.rebuilt:  # its spec did not say which interfaces
                            source = _source(by_name, n)
                            more = set(usb.interfaces_for(self.config.sysfs, source, now))
                            if not more <= set(claim.usb_interfaces):
                                claim.usb_interfaces = sorted(more | set(claim.usb_interfaces))
                                dirty = True
                        if claim.present.get(n) != is_present:
                            claim.present[n] = is_present
                            dirty = True
                    spec = cdi.build_spec(uid, _deliveries(claim), self.config.dev_dir)
                    if cdi.write_spec(self.config.cdi_dir, uid, spec):
                        written.append(uid)
                    self._written_at(uid, claim)
                    self._want_status(claim)  # written only when it differs
                except (OSError, SpecError) as e:
                    log.error("reconcile claim %s: %s", uid, e)
            if dirty:
                self._state.save()
            self._update_health_locked()
        if written:
            log.info("reconcile rewrote the CDI specs of %s", ", ".join(written))
        if self._serving_since is not None:
            self._watch_rebuilt()  # the other instance of an upgrade may have rebuilt some
        self.recheck_late()  # a kubelet that opens no health stream still sees it end
        return written

    # -- views -----------------------------------------------------------------------------------

    def claimed(self) -> Claimed:
        """The devices the prepared claims hold: every walk of this node takes them.

        Read as the state is on disk, so in a seamless upgrade the claims the other instance
        prepared shape this instance's walks too (its slice is the same slice).
        """
        self.load()
        with self._exclusive() as busy:
            if busy:
                log.warning("the walk knows this instance's claims only: %s", busy)
            return self._claimed_locked()

    def _claimed_locked(self) -> Claimed:
        return claimed_by(self._state.claims.values())

    def prepared(self) -> dict[str, PreparedClaim]:
        self.load()
        with self._lock:
            return dict(self._state.claims)

    def health(self) -> tuple[int, tuple[DeviceHealthState, ...]]:
        with self._health.cond:
            return self._health.version, self._health.devices

    def wake_health(self) -> None:
        """Wake every health stream (one whose call ended then returns at once)."""
        with self._health.cond:
            self._health.cond.notify_all()

    def wait_health(self, version: int, timeout: float) -> tuple[int, tuple[DeviceHealthState,
                                                                              ...]]:
        """Block until the health differs from ``version``, the timeout, or stop."""
        self.recheck_late()
        with self._health.cond:
            if self._health.version == version and not self.stopping:
                self._health.cond.wait(timeout)
            return self._health.version, self._health.devices

    def _note_late(self, uid: str, claim: PreparedClaim,
                   found: dict[str, list[LeftOut]]) -> None:
        """Remember a claim's late registrants; one log line for each that is new."""
        for n in claim.device_names():
            now = tuple(found.get(n, ()))
            before = self._late.get((uid, n), ())
            for x in now:
                if x not in before:
                    log.warning("%s", late.late_line(claim.namespace, claim.name, n, x))
            if now:
                self._late[(uid, n)] = now
            elif before:
                self._late.pop((uid, n), None)
                log.info("claim %s/%s: Bluetooth device %s is healthy again", claim.namespace,
                         claim.name, n)

    def _written_at(self, uid: str, claim: PreparedClaim) -> float:
        """When the content of ``claim``'s spec was last written, as far as this instance knows:
        the time it wrote it, or the time it first saw that content (the other instance of an
        upgrade wrote it, or the state was read at start), which is later, never earlier."""
        key = (sorted((n, [tuple(x) for x in v]) for n, v in claim.nodes.items()),
               sorted(claim.present.items()))
        seen = self._written.get(uid)
        if seen is None or seen[1] != key:
            seen = self._written[uid] = (time.time(), key)
        return seen[0]

    def recheck_late(self) -> None:
        """A late registrant's container may restart with no walk since (a restart sends no
        uevent): at each health message and after each pass, a claim whose containers the
        kubelet recorded as started after the spec without the late numbers was written is
        healthy again (rules: bluetooth.late-registrant). The API is asked outside the lock."""
        with self._lock:
            if not self._late or self.stopping or self._kube is None:
                return
            asked: dict[str, tuple[str, str, float]] = {}
            for uid, _ in self._late:
                claim = self._state.claims.get(uid)
                if claim is not None and claim.name:
                    asked[uid] = (claim.namespace, claim.name, self._written_at(uid, claim))
        restarted = {uid for uid, (namespace, name, written) in asked.items()
                     if (starts := container_starts(self._kube, namespace, name, uid))
                     is not None and late.restarted_since(starts, written)}
        if not restarted:
            return
        with self._exclusive() as busy:
            if busy:
                return
            dirty = False
            for (uid, n), found in list(self._late.items()):
                claim = self._state.claims.get(uid)
                if claim is None or uid not in restarted \
                        or self._written_at(uid, claim) != asked[uid][2]:
                    continue  # gone, not restarted, or its spec changed since the API was asked
                started = late.started_events(claim.nodes)
                if started != claim.started:
                    claim.started, dirty = started, True
                held = set(claim.started.get(n, ()))
                still = tuple(x for x in found if x.node.minor in held)
                if still:
                    self._late[(uid, n)] = still
                else:
                    del self._late[(uid, n)]
                    log.info("claim %s/%s: Bluetooth device %s is healthy again: the kubelet "
                             "recorded its containers' start after the current set was "
                             "written", claim.namespace, claim.name, n)
            if dirty:
                try:
                    self._state.save()
                except OSError as e:
                    log.error("saving the plugin state: %s", e)
            self._update_health_locked()

    def late_registrants(self) -> dict[tuple[str, str], tuple[LeftOut, ...]]:
        """(claim UID, device) -> the numbers its running container holds that are now other
        devices' (rules: bluetooth.late-registrant; docs/plugin.md, "Health")."""
        with self._lock:
            return dict(self._late)

    def _update_health_locked(self) -> None:
        states: dict[tuple[str, str], bool] = {}
        why: dict[tuple[str, str], str] = {}
        for uid in [k[0] for k in self._late if k[0] not in self._state.claims]:
            self._late = {k: v for k, v in self._late.items() if k[0] != uid}
        for uid in [u for u in self._written if u not in self._state.claims]:
            del self._written[uid]
        held = {n for c in self._state.claims.values() for n in c.device_names()}
        for n in [n for n in self._facts if n not in held]:
            del self._facts[n]
        self._metrics.late_registrants(sum(len(v) for v in self._late.values()))
        for uid, claim in self._state.claims.items():
            for n in claim.device_names():
                key = (claim.pool, n)
                states[key] = states.get(key, True) and claim.present.get(n, False) \
                    and (uid, n) not in self._late
                if claim.present.get(n, False) and self._late.get((uid, n)):
                    why.setdefault(key, late.health_message(self._late[(uid, n)][0]))
        devices = tuple(DeviceHealthState(p, d, h, "" if h else why.get((p, d), ""))
                        for (p, d), h in sorted(states.items()))
        with self._health.cond:
            if devices != self._health.devices:
                self._health.devices = devices
                self._health.version += 1
                self._health.cond.notify_all()


def _by_name(inv: Inventory) -> dict[str, PublishedDevice]:
    return {d.name: d for d in inv.devices}


def _source(by_name: dict[str, PublishedDevice], name: str) -> str | None:
    """The sysfs path behind a published device (None for one the walk holds unpublished)."""
    d = by_name.get(name)
    return d.source if d is not None else None


def _deliveries(claim: PreparedClaim) -> list[Delivery]:
    return [Delivery(n, tuple(claim.nodes.get(n, ())), claim.present.get(n, False))
            for n in claim.device_names()]


_Out = TypeVar("_Out")


def _counted(claims: Sequence[ClaimRef], refused: Mapping[str, str],
             work: Callable[[Sequence[ClaimRef]], _Out],
             record: Callable[[dict[str, str], float], None],
             errors: Callable[[_Out], dict[str, str]]) -> _Out:
    """Run one kubelet request and count it per claim with its duration: each claim's error
    from the answer, or every claim (the ``refused`` too) "failed" when the request raised."""
    started = time.perf_counter()
    try:
        out = work(claims)
    except BaseException:
        record(dict.fromkeys([*refused, *(c.uid for c in claims)], "failed"),
               time.perf_counter() - started)
        raise
    record(errors(out), time.perf_counter() - started)
    return out
