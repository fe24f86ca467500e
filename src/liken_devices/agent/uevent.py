"""The kernel's word: uevents from a NETLINK_KOBJECT_UEVENT socket, and when they wake a walk.

rules: uevents.actions, uevents.quiet-second, uevents.virtual-net. The node walks again when the
kernel sends a uevent for a device that arrives, leaves or changes its driver; it waits for one
second with no further uevent (so the dozen uevents of one USB device make one walk), and the
uevents of the virtual network devices that pods add and remove wake no walk. A walk starts after
one second of quiet, and at the latest five seconds after the first uevent of a burst; uevents whose
path is under ``/devices/virtual/net/`` (the ``queues`` children included) wake nothing; and only
the actions named here wake a walk: ``add``, ``remove``, ``bind``, ``unbind`` and ``move`` (a device
arrives, leaves or changes its driver). ``change``, ``online`` and ``offline`` do not: a laptop's
battery alone sends a ``change`` every minute, and a CPU going offline changes no hardware a pod can
claim.

The socket is the kernel's own multicast group 1 (the kernel's "kobject uevent" broadcast, no udev
needed): any process may bind it, messages are ``ACTION@DEVPATH`` followed by NUL-separated
``KEY=VALUE`` pairs. udev's rebroadcasts (group 2, "libudev" magic) are not joined. When the
kernel drops messages because the socket's buffer overflowed (``ENOBUFS``), what was lost is
unknown, so an overrun always wakes a walk.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass, field
from enum import StrEnum

NETLINK_KOBJECT_UEVENT = 15  # <linux/netlink.h>
KERNEL_GROUP = 1  # the kernel's broadcast; udev's rebroadcast is group 2
RCVBUF = 8 * 1024 * 1024  # a burst of thousands of uevents (a dock, a hub of disks) fits
SO_RCVBUFFORCE = 33  # <asm-generic/socket.h>; needs CAP_NET_ADMIN, else SO_RCVBUF is capped

QUIET = 1.0  # seconds of no uevent before a walk (rules: uevents.quiet-second)
MAX_WAIT = 5.0  # a walk at the latest this long after a burst's first uevent
IGNORED_PREFIXES = ("/devices/virtual/net/",)


class Action(StrEnum):
    """The kernel's uevent actions (``kobject_action`` in ``<linux/kobject.h>``), and ours."""

    ADD = "add"
    REMOVE = "remove"
    CHANGE = "change"
    MOVE = "move"
    ONLINE = "online"
    OFFLINE = "offline"
    BIND = "bind"
    UNBIND = "unbind"
    OVERRUN = "overrun"  # not the kernel's: the socket lost uevents, a walk is due


# A device arrives, leaves, or changes its driver, or uevents were lost (rules: uevents.actions).
WAKING_ACTIONS = frozenset({Action.ADD, Action.REMOVE, Action.BIND, Action.UNBIND, Action.MOVE,
                            Action.OVERRUN})


@dataclass(frozen=True, slots=True)
class Uevent:
    action: str
    devpath: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def subsystem(self) -> str | None:
        return self.env.get("SUBSYSTEM")


def parse(data: bytes) -> Uevent | None:
    """A kernel uevent datagram, or None for anything else (udev's, truncated, garbage)."""
    if data.startswith(b"libudev"):
        return None
    parts = data.split(b"\0")
    head = parts[0].decode("utf-8", "replace")
    action, sep, devpath = head.partition("@")
    if not sep or not action or not devpath.startswith("/"):
        return None
    env: dict[str, str] = {}
    for raw in parts[1:]:
        if not raw:
            continue
        key, eq, value = raw.decode("utf-8", "replace").partition("=")
        if eq:
            env[key] = value
    return Uevent(env.get("ACTION", action), env.get("DEVPATH", devpath), env)


def wakes_walk(event: Uevent) -> bool:
    """Whether this uevent may change the slice: an arrival, a departure or a driver change
    (or lost uevents), and never a virtual network device's."""
    if event.action not in WAKING_ACTIONS:
        return False  # change, online, offline, and any action this kernel invents later
    path = event.devpath
    return not any(path.startswith(p) or path + "/" == p for p in IGNORED_PREFIXES)


class UeventSocket:
    """A bound, non-blocking kernel uevent socket; :meth:`drain` reads what is queued."""

    def __init__(self) -> None:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT)
        try:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
            sock.bind((0, KERNEL_GROUP))
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self.overflowed = 0  # times the kernel dropped events because we were slow

    def fileno(self) -> int:
        return self._sock.fileno()

    def drain(self, limit: int = 100_000) -> list[Uevent]:
        """Every queued uevent. An overrun (ENOBUFS) is reported as a synthetic one: events
        were lost, so a walk is due whatever they were."""
        out: list[Uevent] = []
        while len(out) < limit:
            try:
                data = self._sock.recv(65536)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    self.overflowed += 1
                    out.append(Uevent(Action.OVERRUN, "/", {}))
                    continue
                raise
            event = parse(data)
            if event is not None:
                out.append(event)
        return out

    def close(self) -> None:
        self._sock.close()


class Debouncer:
    """When the walk for the current burst is due: 1 s after its last wake, at most 5 s after
    its first. Pure (the caller passes the clock) so the rule is testable exactly."""

    def __init__(self, quiet: float = QUIET, max_wait: float = MAX_WAIT) -> None:
        self.quiet = quiet
        self.max_wait = max_wait
        self._first: float | None = None
        self._last: float | None = None

    @property
    def pending(self) -> bool:
        return self._first is not None

    def wake(self, now: float) -> None:
        if self._first is None:
            self._first = now
        self._last = now

    def due_at(self) -> float | None:
        if self._first is None or self._last is None:
            return None
        return min(self._last + self.quiet, self._first + self.max_wait)

    def due(self, now: float) -> bool:
        at = self.due_at()
        return at is not None and now >= at

    def clear(self) -> None:
        self._first = self._last = None
