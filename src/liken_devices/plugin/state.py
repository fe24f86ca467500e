"""The plugin's memory of prepared claims, kept on disk so a restart forgets nothing.

The plugin, the kubelet or the machine may restart at any point, and the kubelet may call
Unprepare long after Prepare, when the ResourceClaim is already deleted (the kubelet's DRA calls
carry only namespace/name/uid). So everything Unprepare and the reconcile pass need is here: per
claim UID its namespace/name, the devices with their request names, the nodes each delivered last
(so an absent device still gets one nonexistent path per node), and the USB interfaces to give
back to the kernel. The CDI directory is a tmpfs on a real node, so the state lives elsewhere
(default ``/var/lib/liken-devices/plugin``), written with the project's one atomic writer.

The file is hostile input like any other (docs/plugin.md, "Bad input"): it is read bounded and
parsed strictly, and a file that cannot be read for any reason is kept aside and the claims are
rebuilt from the CDI specs on disk, which name the claim UID, its devices and their nodes. Only
what a spec does not hold is lost until the kubelet prepares the claim again (namespace/name,
request names, share IDs; the USB interfaces are looked up again at the next walk).

Beside the state, ``names/<claim UID>`` holds each prepared claim's ``namespace/name``, one file
per claim: a claim rebuilt from its spec after the state file was lost still has the name to
look it up in the API with (docs/plugin.md, "Bad input": a rebuilt claim the API does not know is
dropped once the kubelet had its chance to unprepare it).

Locks live in the state directory (``flock``, released by the kernel when the process dies):

* ``instance.lock``, held for the process's life: exclusively by a plugin in the default mode, so
  a second ``plugin`` or ``run`` on the node is refused, or shared by the instances of a seamless
  upgrade (docs/plugin.md, "Upgrades"), which are two by design;
* ``holder-*``, one per instance, locked by it for its life and naming it (pid, host, pod, mode,
  since when): a refused instance names the holders whose lock is still held, so it never names a
  process that died long ago (its file, unlocked, is removed);
* ``write.lock``, held around every read-modify-write of the state and the specs, so the two
  instances of an upgrade write one at a time and each sees the other's last write.

The holder files also say which instance of an upgrade is the newer, and that is what the node's
one writer rests on (rules: limits.one-writer): the agent writes the API's objects and the
reconcile pass's specs only from the newest live instance (:meth:`StateStore.newer_instance`). A
holder's name carries its pod's start on ``CLOCK_BOOTTIME``, which no one steps back (the wall
clock can be, by NTP or by hand), and the start of the pod rather than of the process: the pod's
first instance writes it to ``started-<pod UID>`` (with the boot's id), and a restarted container
of that pod takes it from there, so the old pod restarting mid-rollout stays the older. An
instance in ``--seamless-upgrade`` mode whose holder file cannot be made (no inode left, an I/O
error) is invisible to the other instance, which then writes; so it cannot tell that it is the
newest, and :meth:`StateStore.newer_instance` raises :class:`HolderMissing` (and tries again each
time it is asked) instead of answering "none". A holder file whose words cannot be written (no
block left) is kept empty: its name and its lock are what order and prove it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import math
import os
import re
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..files import make_dir, read_bounded, sweep_temp, write_atomic
from ..inventory.model import Claimed
from ..sysfs.model import DevNode
from ..terminal import clean
from . import cdi
from .cdi import SpecError
from .claimref import parse_uid
from .claims import ClaimError, check_ref

if TYPE_CHECKING:
    from ..inventory.model import Claimed

log = logging.getLogger(__name__)

STATE_FILE = "claims.json"
NAMES_DIR = "names"
INSTANCE_LOCK = "instance.lock"
HOLDER_PREFIX = "holder-"
MAX_HOLDERS = 16  # holder files read for a refusal message; an upgrade has two
MAX_NAME_BYTES = 512
WRITE_LOCK = "write.lock"
# started-<pod UID>: "<boot id> <ns since boot>" of the pod's first instance (a restarted
# container of the pod keeps its place in the order of instances).
STARTED_PREFIX = "started-"
MAX_STARTED_BYTES = 128
MAX_STARTED = 16  # pods' records kept; a surge upgrade has two live pods
# A holder's number is this plus the pod's start in ns on CLOCK_BOOTTIME: above every
# time.time_ns() (a build that named holders by the wall clock), so such a build's instance
# stands by for this one, and this one counts it as older. Still 20 digits for a century of uptime.
HOLDER_EPOCH = 10**19
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
VERSION = 1
STATE_MODE = 0o600  # claim names and namespaces: root's business only
DIR_MODE = 0o700
# A node holds at most a few thousand claims of a few hundred bytes each; far more is not ours.
MAX_STATE_BYTES = 64 << 20
MAX_HOLDER_BYTES = 4096
# How long a write waits for the other instance's write (a seamless upgrade): well inside the
# kubelet's 45 s per call, and far more than one prepare takes (docs/performance.md).
WRITE_LOCK_WAIT = 20.0

# A holder file's name: the pid and HOLDER_EPOCH + the pod's start on CLOCK_BOOTTIME (a build
# before it: time.time_ns() of the instance's start, always smaller).
_HOLDER_NAME = re.compile(HOLDER_PREFIX + r"([0-9]{1,10})-([0-9]{1,20})")

# A USB interface as the kernel names it ("1-2:1.0", "3-1.4.2:1.1"): written to drivers_probe.
_USB_INTERFACE = re.compile(r"[0-9]{1,3}-[0-9]{1,3}(\.[0-9]{1,3}){0,6}:[0-9]{1,3}\.[0-9]{1,3}")


class StateError(ValueError):
    """A state file that is not what this plugin writes."""


class StateBusy(InputError):
    """Another instance holds the state directory's lock (exit 2, one line)."""


class StateDirError(InputError):
    """A state directory that cannot be made or locked (exit 2, one line)."""


class HolderMissing(OSError):
    """This instance has no holder file (it cannot be made), so the other instance of an upgrade
    cannot know it runs: it cannot tell whether it is the newest (rules: limits.one-writer)."""


class StateLockTimeout(OSError, InputError):
    """The other instance of an upgrade held the write lock too long: in band for a call, one
    line and exit 2 at start."""


@dataclass(slots=True)
class PreparedDevice:
    """One allocated device of a prepared claim."""

    name: str
    requests: list[str]  # base request names (what the kubelet matches containers on)
    share_id: str | None = None


@dataclass(slots=True)
class PreparedClaim:
    uid: str
    namespace: str
    name: str
    pool: str
    devices: list[PreparedDevice]
    # device name -> the nodes it delivered when last present (stays when it goes away)
    nodes: dict[str, list[DevNode]] = field(default_factory=dict)
    # device name -> present at the last prepare/reconcile
    present: dict[str, bool] = field(default_factory=dict)
    usb_interfaces: list[str] = field(default_factory=list)  # "1-2:1.0", ...
    prepared_at: float = field(default_factory=time.time)
    # Rebuilt from its CDI spec after the state was lost: namespace/name and request names are
    # unknown until the kubelet prepares it again.
    rebuilt: bool = False
    # Bluetooth device -> the legacy event minors its running container started with (late.py).
    started: dict[str, list[int]] = field(default_factory=dict)

    def device_names(self) -> list[str]:
        return sorted({d.name for d in self.devices})

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "pool": self.pool,
            "devices": [
                {"name": d.name, "requests": d.requests}
                | ({"shareID": d.share_id} if d.share_id else {})
                for d in self.devices
            ],
            "nodes": {k: [[n.name, n.type, n.major, n.minor] for n in v]
                      for k, v in sorted(self.nodes.items())},
            "present": dict(sorted(self.present.items())),
            "usbInterfaces": self.usb_interfaces,
            "preparedAt": self.prepared_at,
        } | ({"rebuilt": True} if self.rebuilt else {}) | (
            {"startedEvents": dict(sorted(self.started.items()))} if self.started else {})

    @classmethod
    def from_json(cls, uid: str, obj: Any) -> PreparedClaim:
        """One claim of the state file, checked field by field; :class:`StateError` if bad."""
        cdi.check_uid(uid)
        o = _dict(obj, f"claim {uid}")
        devices = []
        for d in _list(o.get("devices", []), "devices"):
            d = _dict(d, "a device")
            share = d.get("shareID")
            devices.append(PreparedDevice(
                cdi.check_device(_str(d.get("name"), "a device name")),
                [_str(r, "a request name") for r in _list(d.get("requests", []), "requests")],
                None if share is None else _str(share, "a share ID")))
        nodes: dict[str, list[DevNode]] = {}
        for dev, lst in _dict(o.get("nodes", {}), "nodes").items():
            out = []
            for n in _list(lst, f"the nodes of {dev}"):
                n = _list(n, "a node")
                if len(n) != 4:
                    raise StateError(f"node {n!r} is not [name, type, major, minor]")
                name, typ, major, minor = n
                if typ not in ("c", "b"):
                    raise StateError(f"node type {typ!r}")
                out.append(DevNode(cdi.check_node_name(_str(name, "a node name")), typ,
                                   _number(major), _number(minor)))
            nodes[cdi.check_device(dev)] = out
        present = {cdi.check_device(k): _bool(v)
                   for k, v in _dict(o.get("present", {}), "present").items()}
        interfaces = [_str(i, "a USB interface") for i in _list(o.get("usbInterfaces", []),
                                                               "usbInterfaces")]
        for i in interfaces:
            if not _USB_INTERFACE.fullmatch(i):
                raise StateError(f"USB interface {i!r} is not a USB interface name")
        prepared_at = o.get("preparedAt", 0.0)
        if type(prepared_at) not in (int, float) or not math.isfinite(prepared_at):
            raise StateError(f"preparedAt {prepared_at!r} is not a time")
        started: dict[str, list[int]] = {}
        for dev, lst in _dict(o.get("startedEvents", {}), "startedEvents").items():
            minors = [_number(m) for m in _list(lst, f"the started events of {dev}")]
            if len(minors) > 32 or not all(64 <= m < 96 for m in minors):
                raise StateError(f"the started events of {dev} are not legacy event minors")
            started[cdi.check_device(dev)] = minors
        return cls(uid=uid, namespace=_str(o.get("namespace"), "namespace"),
                   name=_str(o.get("name"), "name"), pool=_str(o.get("pool", ""), "pool"),
                   devices=devices, nodes=nodes, present=present, usb_interfaces=interfaces,
                   prepared_at=float(prepared_at), rebuilt=_bool(o.get("rebuilt", False)),
                   started=started)


def _str(v: Any, what: str) -> str:
    if type(v) is not str:
        raise StateError(f"{what} is not a string: {_short(v)}")
    # Names of Kubernetes objects and requests: short and printable (they reach a terminal).
    if len(v) > 253 or not v.isprintable():
        raise StateError(f"{what} is not a printable name of at most 253 characters: "
                         f"{_short(v)}")
    return v


def _bool(v: Any) -> bool:
    if type(v) is not bool:
        raise StateError(f"{_short(v)} is not true or false")
    return v


def _number(v: Any) -> int:
    if type(v) is not int or not 0 <= v < 1 << 32:
        raise StateError(f"device number {_short(v)} is not a number of 32 bits")
    return v


def _list(v: Any, what: str) -> list[Any]:
    if type(v) is not list:
        raise StateError(f"{what} is not a list: {_short(v)}")
    return v


def _dict(v: Any, what: str) -> dict[str, Any]:
    if type(v) is not dict:
        raise StateError(f"{what} is not an object: {_short(v)}")
    return v


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_state(raw: bytes) -> dict[str, PreparedClaim]:
    """The claims of a state file's bytes; :class:`StateError` for anything else.

    Any decoding failure of any depth is a :class:`StateError`: bytes that are not UTF-8, JSON
    nested past the parser's recursion limit, numbers of the wrong type or range, a field of the
    wrong shape.
    """
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise StateError(f"not a JSON document: {_reason(e)}") from None
    try:
        o = _dict(obj, "the state")
        # Exactly the integer: JSON's true and 1.0 compare equal to 1 in Python.
        if type(o.get("version")) is not int or o.get("version") != VERSION:
            raise StateError(f"state version {_short(o.get('version'))}, want {VERSION}")
        return {uid: PreparedClaim.from_json(uid, c)
                for uid, c in _dict(o.get("claims"), "claims").items()}
    except StateError:
        raise
    except SpecError as e:
        raise StateError(str(e)) from None
    except Exception as e:  # anything else a hostile file provokes is "corrupt" as well
        raise StateError(_reason(e)) from None


def _reason(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= 200 else text[:197] + "..."


def render_state(claims: dict[str, PreparedClaim]) -> bytes:
    obj = {"version": VERSION,
           "claims": {uid: c.to_json() for uid, c in sorted(claims.items())}}
    return (json.dumps(obj, indent=1) + "\n").encode()


def rebuild_from_specs(cdi_dir: Path, node: str,
                       names: Callable[[str], tuple[str, str] | None] = lambda uid: None
                       ) -> dict[str, PreparedClaim]:
    """The claims the liken.sh specs in ``cdi_dir`` describe; each one logged.

    A spec names the claim UID, its devices and their nodes; ``names`` gives the claim's
    namespace and name when they were kept (``names/<uid>``); what neither holds stays unknown
    until the kubelet prepares the claim again. A spec that cannot be read back loses its claim,
    which is logged by UID.
    """
    claims: dict[str, PreparedClaim] = {}
    for uid in cdi.spec_uids(cdi_dir):
        try:
            deliveries = cdi.read_claim_spec(cdi_dir, uid)
        except (OSError, SpecError) as e:
            log.error("claim %s is lost: its CDI spec cannot be read back (%s)", uid, e)
            continue
        namespace, name = names(uid) or ("", "")
        claims[uid] = PreparedClaim(
            uid=uid, namespace=namespace, name=name, pool=node,
            devices=[cdi_device(d.device) for d in deliveries],
            nodes={d.device: list(d.nodes) for d in deliveries},
            present={d.device: d.present for d in deliveries}, rebuilt=True)
        log.warning("claim %s%s rebuilt from its CDI spec (devices %s); its %srequest names "
                    "stay unknown until the kubelet prepares it again", uid,
                    f" ({namespace}/{name})" if name else "",
                    ", ".join(d.device for d in deliveries),
                    "" if name else "namespace, name and ")
    return claims


def cdi_device(name: str) -> PreparedDevice:
    return PreparedDevice(name, [], None)


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.lstat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def holder_identity(shared: bool = False) -> str:
    """Who holds the lock, for the refusal message of a second instance."""
    who = f"pid {os.getpid()} on {socket.gethostname()}"
    pod = os.environ.get("POD_NAME")
    if pod:
        who += f" (pod {pod})"
    if shared:
        who += " in --seamless-upgrade mode"
    return who + time.strftime(", since %Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _holder_key(name: str) -> tuple[int, int] | None:
    """When a holder file's instance started, as (its number, pid), or None for another name."""
    m = _HOLDER_NAME.fullmatch(name)
    return (int(m.group(2)), int(m.group(1))) if m else None


def _live_holder(path: Path) -> str | None:
    """The words of a holder file whose instance still runs (its lock is held), or None; the
    file of an instance that died is removed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # locked by its instance: alive
            return _clean(os.pread(fd, MAX_HOLDER_BYTES, 0).decode("utf-8", "replace"))
        with contextlib.suppress(OSError):  # nobody holds it: its instance is gone
            path.unlink()
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def boot_clock() -> int:
    """Nanoseconds since boot, suspend included (``CLOCK_BOOTTIME``): one clock for every process
    of the node, which only goes forward (the wall clock can be stepped back)."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def boot_id() -> str:
    """This boot's id (the kernel's random ``boot_id``): a start on the boot clock means nothing
    in another boot."""
    try:
        return read_bounded(BOOT_ID, 64, follow_symlinks=True).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _parse_started(raw: bytes) -> tuple[str, int] | None:
    """A ``started-*`` record's (boot id, ns since boot), or None (the file is hostile too)."""
    try:
        boot, ns = raw.decode("ascii").split()
    except (UnicodeDecodeError, ValueError):
        return None
    if not re.fullmatch(r"[0-9a-f-]{1,64}", boot) or not re.fullmatch(r"[0-9]{1,19}", ns):
        return None
    return boot, int(ns)


def _clean(text: str) -> str:
    """The holder's words as one printable line (the lock file is hostile input too)."""
    return clean(text.strip().splitlines()[0], 200) if text.strip() else ""


class StateStore:
    """Claim UID -> :class:`PreparedClaim`, mirrored to ``<dir>/claims.json`` on every change."""

    def __init__(self, directory: Path, cdi_dir: Path | None = None, node: str = "",
                 pod_uid: str | None = None) -> None:
        self.directory = directory
        self.pod_uid = pod_uid  # whose start orders this instance (seamless upgrade)
        self.path = directory / STATE_FILE
        self.cdi_dir = cdi_dir
        self.node = node
        self.claims: dict[str, PreparedClaim] = {}
        self._seen: tuple[int, int, int] | None = None  # the file as last read or written
        self._instance_fd: int | None = None
        self._holder_fd: int | None = None
        self._holder_path: Path | None = None
        self._holder_error: str | None = None  # why the holder file could not be made
        self._holder_errno = 0
        self._start = 0  # HOLDER_EPOCH + the pod's start on the boot clock
        self._write_fd: int | None = None
        self.shared = False  # other instances write too (a seamless upgrade)

    # -- locks -----------------------------------------------------------------------------------

    def acquire(self, shared: bool = False) -> None:
        """Take the instance lock for the process's life, or :class:`StateBusy`."""
        if self._instance_fd is not None:
            return
        try:
            make_dir(self.directory, DIR_MODE)
            fd = _open_lock(self.directory / INSTANCE_LOCK)
        except OSError as e:
            raise StateDirError(f"cannot use the plugin state directory {self.directory}: "
                                f"{e.strerror or e}") from None
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateBusy(self._busy_message(shared)) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            self._write_fd = _open_lock(self.directory / WRITE_LOCK)
        except BaseException:
            os.close(fd)
            raise
        self._instance_fd = fd
        self.shared = shared
        try:
            with self.write_lock():  # the other instance reads and sweeps the records too
                self._start = HOLDER_EPOCH + self._pod_start()
                self._name_holder()
        except BaseException:
            self.release()
            raise

    def _pod_start(self) -> int:
        """When this instance's pod started, in ns on the boot clock: now for the pod's first
        instance, which records it in ``started-<pod UID>``; a restarted container of the pod
        reads it there (rules: limits.one-writer). Without a pod (the default mode), now."""
        now = boot_clock()
        if self.pod_uid is None or not self.shared:
            return now
        boot = boot_id()
        record = self.directory / f"{STARTED_PREFIX}{parse_uid(self.pod_uid, 'pod UID')}"
        try:
            got = _parse_started(read_bounded(record, MAX_STARTED_BYTES))
        except OSError:
            got = None
        if got is not None and boot and got[0] == boot and got[1] <= now:
            start = got[1]
        else:
            start = now
            try:
                write_atomic(record, f"{boot} {now}\n".encode(), mode=STATE_MODE,
                             dir_mode=DIR_MODE)
            except OSError as e:
                log.warning("cannot record this pod's start in %s (%s): if its container "
                            "restarts while a newer pod runs, it will count as the newer",
                            record, e.strerror or e)
        self._sweep_started(boot, keep=record.name)
        return start

    def _sweep_started(self, boot: str, keep: str) -> None:
        """Remove the pods' start records of other boots (or unreadable), and past the newest
        ``MAX_STARTED`` the oldest: a live pod of a surge upgrade is one of the newest two."""
        try:
            names = [n for n in os.listdir(self.directory) if n.startswith(STARTED_PREFIX)]
        except OSError:
            return
        kept: list[tuple[int, str]] = []
        for name in names:
            try:
                got = _parse_started(read_bounded(self.directory / name, MAX_STARTED_BYTES))
            except OSError:
                got = None
            if name != keep and (got is None or got[0] != boot):
                with contextlib.suppress(OSError):
                    (self.directory / name).unlink()
            elif got is not None:
                kept.append((got[1], name))
        others = [name for _, name in sorted(kept, reverse=True) if name != keep]
        for name in others[MAX_STARTED - 1:]:  # this pod's own record is one of those kept
            with contextlib.suppress(OSError):
                (self.directory / name).unlink()

    def _name_holder(self) -> None:
        """Write this instance's holder file, locked for the process's life: made under a
        temporary name, locked, filled, then renamed into place, so no reader ever sees it
        unlocked. A refusal names the holders, and in a seamless upgrade the holders are how
        each instance knows the others and which one is the newest, the one writer
        (rules: limits.one-writer): so when the file cannot be made, ``_holder_error`` says why
        and :meth:`newer_instance` raises :class:`HolderMissing`. Words that cannot be written
        (no block left) leave the file empty: its name orders it, its lock proves it runs."""
        tmp = self.directory / f".{HOLDER_PREFIX}{os.getpid()}-{self._start}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         STATE_MODE)
        except OSError as e:
            self._holder_unmade(e)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            try:
                os.write(fd, (holder_identity(self.shared) + "\n").encode())
            except OSError as e:
                log.warning("this instance's holder file %s is kept without its words: %s",
                            tmp.name[1:], e.strerror or e)
            final = self.directory / tmp.name[1:]
            os.rename(tmp, final)
        except OSError as e:
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._holder_unmade(e)
            return
        if self._holder_error is not None:
            log.warning("this instance's holder file %s is made at last", final)
        self._holder_fd, self._holder_path, self._holder_error = fd, final, None

    def _holder_unmade(self, e: OSError) -> None:
        why = e.strerror or str(e)
        if why != self._holder_error:
            log.error("cannot make this instance's holder file in %s: %s%s", self.directory, why,
                      "; writing nothing the node shows until it is made (docs/plugin.md, "
                      "\"Upgrades\")" if self.shared else "")
        self._holder_error = why
        self._holder_errno = e.errno or errno.EIO

    def _holder_in_place(self) -> bool:
        """Whether this instance's holder file is still the one at its name (someone may have
        removed it: then the other instance cannot see this one)."""
        if self._holder_path is None or self._holder_fd is None:
            return False
        try:
            return os.stat(self._holder_path, follow_symlinks=False).st_ino == \
                os.fstat(self._holder_fd).st_ino
        except OSError:
            return False

    def live_holders(self) -> list[str]:
        """The holder files of the instances that still run (those of dead ones removed)."""
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.startswith(HOLDER_PREFIX))
        except OSError:
            return []
        out = []
        for name in names[:MAX_HOLDERS]:
            words = _live_holder(self.directory / name)
            if words is not None and self._holder_path != self.directory / name:
                out.append(words or name)  # a holder kept without its words (a full disk)
        return out

    def newer_instance(self) -> str | None:
        """In a seamless upgrade, the words of a live instance that started after this one
        (the newest such), else None: alone, not sharing, or the newest. :class:`HolderMissing`
        when this instance has no holder file (made again here first): the other instance
        cannot know it runs, so this one cannot tell that it is the newest."""
        if not self.shared or self._instance_fd is None:
            return None
        if not self._holder_in_place():
            # Not under write.lock: a flock belongs to the open file, so taking it here (the
            # agent's thread) while a prepare holds it would release it on leaving. Making
            # the holder needs no lock: its temporary name is this process's own.
            self._drop_holder()
            self._name_holder()
        mine = _holder_key(self._holder_path.name) if self._holder_path is not None else None
        if mine is None:
            raise HolderMissing(self._holder_errno, f"this instance's holder file cannot be "
                                f"made in {self.directory} ({self._holder_error}), so the other "
                                "instance cannot know it runs")
        try:
            names = os.listdir(self.directory)
        except OSError:
            return None
        newer = sorted(((key, name) for name in names
                        if (key := _holder_key(name)) is not None and key > mine), reverse=True)
        for _, name in newer[:MAX_HOLDERS]:
            words = _live_holder(self.directory / name)
            if words is not None:
                return words or name
        return None

    def _busy_message(self, shared: bool) -> str:
        holder = "; ".join(self.live_holders())
        if shared:  # we asked for a share: the holder runs in the default, exclusive mode
            who = f"by {holder}, which does not run in --seamless-upgrade mode" if holder else \
                "by an instance that does not run in --seamless-upgrade mode"
        else:
            who = f"by {holder}" if holder else \
                "by instances in --seamless-upgrade mode"
        return (f"the plugin state {self.directory} is locked {who}: another liken-devices "
                "plugin or run serves this node")

    def _drop_holder(self) -> None:
        if self._holder_path is not None and self._holder_in_place():
            with contextlib.suppress(OSError):
                self._holder_path.unlink()
        if self._holder_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._holder_fd)
        self._holder_fd = self._holder_path = None

    def release(self) -> None:
        self._drop_holder()
        for fd in (self._write_fd, self._instance_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._write_fd = self._instance_fd = None

    @contextlib.contextmanager
    def write_lock(self, wait: float = WRITE_LOCK_WAIT) -> Iterator[None]:
        """Hold ``write.lock`` (the other instance of an upgrade waits), or
        :class:`StateLockTimeout` after ``wait`` seconds."""
        fd = self._write_fd
        if fd is None:  # not acquired (a store used only to read): nothing to exclude
            yield
            return
        deadline = time.monotonic() + wait
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StateLockTimeout(
                        errno.ETIMEDOUT, f"the plugin state {self.directory} stayed locked by "
                        f"the other instance for {wait:g} s") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[bool]:
        """Hold the write lock and have the state as on disk; yields whether it was re-read
        (another instance of an upgrade wrote it since this one last did). Alone, the plugin is
        the only writer (the instance lock) and its memory is the state."""
        with self.write_lock():
            reread = self.shared and _signature(self.path) != self._seen
            if reread:
                self.load()
            yield reread

    # -- reading and writing ---------------------------------------------------------------------

    def open(self, sweep_orphans: bool = True) -> None:
        """At start, under the write lock: sweep stale temp files, read (or rebuild) the state,
        and remove the specs of claims nobody knows."""
        with self.write_lock():
            for directory, prefix in ((self.directory, STATE_FILE),
                                      (self.directory, STARTED_PREFIX),
                                      (self.cdi_dir, cdi.SPEC_PREFIX)):
                if directory is not None:
                    for name in sweep_temp(directory, prefix):
                        log.info("removed %s, the temp file of an interrupted write",
                                 directory / name)
            self.load()
            self.sweep_names()
            if sweep_orphans and self.cdi_dir is not None:
                for uid in cdi.spec_uids(self.cdi_dir):
                    if uid in self.claims:
                        continue
                    log.warning("removing the CDI spec of claim %s, which no prepare finished",
                                uid)
                    try:
                        cdi.remove_spec(self.cdi_dir, uid)
                    except OSError as e:
                        log.error("cannot remove the CDI spec of claim %s: %s", uid, e)

    def load(self) -> None:
        """Read the state; never raises for what is in the file or at its name.

        A file that cannot be read or parsed is renamed ``claims.json.bad-<time>`` and the claims
        are rebuilt from the CDI specs; so are they when the file is missing but specs are there.
        """
        reason = None
        try:
            raw = read_bounded(self.path, MAX_STATE_BYTES)
        except FileNotFoundError:
            pass
        except OSError as e:  # a directory, a symlink, a FIFO, too large, unreadable
            reason = e.strerror or str(e)
        else:
            try:
                self.claims = parse_state(raw)
                self._seen = _signature(self.path)
                return
            except StateError as e:
                reason = str(e)
        if reason is not None:
            aside = self.path.with_name(f"{STATE_FILE}.bad-{time.time_ns()}")
            try:
                os.rename(self.path, aside)
                log.error("plugin state %s is unreadable (%s); kept as %s; rebuilding the claims "
                          "from the CDI specs", self.path, reason, aside)
            except OSError as e:
                log.error("plugin state %s is unreadable (%s) and cannot be moved aside (%s); "
                          "rebuilding the claims from the CDI specs", self.path, reason, e)
        self.claims = (rebuild_from_specs(self.cdi_dir, self.node, self.read_name)
                       if self.cdi_dir is not None else {})
        self._seen = _signature(self.path)
        if self.claims or reason is not None:
            try:
                self.save()
            except OSError as e:
                log.error("cannot save the rebuilt plugin state %s: %s", self.path, e)

    def save(self) -> None:
        write_atomic(self.path, render_state(self.claims), mode=STATE_MODE, dir_mode=DIR_MODE)
        self._seen = _signature(self.path)

    # -- the claims' names, kept apart from the state file -----------------------------------

    def remember_name(self, uid: str, namespace: str, name: str) -> None:
        write_atomic(self.directory / NAMES_DIR / cdi.check_uid(uid),
                     f"{namespace}/{name}\n".encode(), mode=STATE_MODE, dir_mode=DIR_MODE)

    def forget_name(self, uid: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.directory / NAMES_DIR / cdi.check_uid(uid)).unlink()

    def read_name(self, uid: str) -> tuple[str, str] | None:
        """The kept ``(namespace, name)`` of a claim, None when missing or not a claim's name
        (the file is hostile input too)."""
        try:
            raw = read_bounded(self.directory / NAMES_DIR / cdi.check_uid(uid), MAX_NAME_BYTES)
            namespace, sep, name = raw.decode("utf-8").strip().partition("/")
            check_ref(namespace, name)
        except (OSError, ValueError, SpecError, ClaimError):
            return None
        return (namespace, name) if sep else None

    def sweep_names(self) -> None:
        """Remove the names of claims the state does not hold."""
        try:
            kept = os.listdir(self.directory / NAMES_DIR)
        except OSError:
            return
        for uid in kept:
            if uid not in self.claims:
                with contextlib.suppress(OSError):
                    (self.directory / NAMES_DIR / uid).unlink()


def _open_lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                 STATE_MODE)
    with contextlib.suppress(OSError):
        os.fchmod(fd, STATE_MODE)
    return fd


def read_state(directory: Path) -> dict[str, PreparedClaim]:
    """The prepared claims as a running plugin last saved them (for ``liken-devices claims``).

    Reads only: no lock is taken and nothing is written, so it works beside a running plugin.
    A missing file is no claims; one that cannot be read raises :class:`StateError`.
    """
    path = directory / STATE_FILE
    try:
        raw = read_bounded(path, MAX_STATE_BYTES)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise StateError(f"{path}: {e.strerror or e}") from None
    try:
        return parse_state(raw)
    except StateError as e:
        raise StateError(f"{path}: {e}") from None


def claimed_by(claims: Iterable[PreparedClaim]) -> Claimed:
    """The devices ``claims`` hold, as every walk of this node takes them.

    rules: usb.claimed-keeps-shape, limits.cap-keeps-claimed
    """
    return Claimed(frozenset(n for c in claims for n in c.device_names()))


def claimed_in(directory: Path) -> Claimed:
    """The claims a running plugin last saved, as a walk takes them (``liken-devices claims``)."""
    return claimed_by(read_state(directory).values())
