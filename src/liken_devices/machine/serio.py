"""Attaching the serial lines that ``spec.serio`` declares to the kernel's serio layer.

rules: serial.attach. A USB-CEC adapter's driver (pulse8_cec, rainshadow_cec)
binds to a serio port that exists only while a program keeps the adapter's tty attached; on
liken a ``spec.serio`` entry declares the attachment and the machine holds it for the life of
the boot. Every ``ttyACM*`` whose USB device has the entry's vendor and product (and serial, when
given) is attached, by the same function the policy asks (rules: serial.one-matching-rule).

The steps, as inputattach takes them for ``--pulse8-cec`` and ``--rainshadow-cec`` (facts from
linuxconsoletools and the kernel's uapi headers):

1. open the tty read-write, without making it a controlling terminal, without waiting for
   carrier (``O_RDWR | O_NOCTTY | O_NONBLOCK``); then, before anything is set, ask which line
   discipline the tty is in (``TIOCGETD`` = 0x5424): anything but ``N_TTY`` means another
   process holds the line (below);
2. line settings: 9600 baud, 8 data bits, no parity, 1 stop bit (``CS8``), receiver on
   (``CREAD``), modem lines ignored (``CLOCAL``), hang up on last close (``HUPCL``); input flags
   ``IGNBRK | IGNPAR``; no output processing; no local modes (raw: no echo, no canonical
   lines, no signals); ``VMIN = 1``, ``VTIME = 0``; applied at once (``TCSANOW``);
3. ``ioctl(TIOCSETD, N_MOUSE)``: the serio line discipline (``N_MOUSE`` = 2, linux/tty.h;
   ``TIOCSETD`` = 0x5423, asm-generic/ioctls.h);
4. ``ioctl(SPIOCSTYPE, &type)``: which serio protocol the port speaks, so the right driver binds
   (``SPIOCSTYPE = _IOW('q', 0x01, unsigned long)``, linux/serio.h; the argument points at an
   ``unsigned long`` whose low byte is the protocol: ``SERIO_PULSE8_CEC`` = 0x40,
   ``SERIO_RAINSHADOW_CEC`` = 0x41);
5. a blocked ``read()`` on the line keeps the serio port registered (see :mod:`.holder`).

The agent holds the descriptor and a holder process reads; both let go when the entry is
removed or the adapter leaves (its tty disappears from the walk). A failure (this kernel may
have no serport line discipline at all) is a Failed state with the kernel's error, and is not
retried until something changes: the adapter is plugged in again (a new USB device number) or
``spec.serio`` changes.

A line another process holds is Waiting, never Failed (rules: serial.across-restarts;
docs/machine.md, "Upgrades and restarts"): in a surge upgrade the old instance of the agent
still reads it. What shows it, from the kernel (drivers/tty/tty_io.c, drivers/tty/n_tty.c,
drivers/input/serio/serport.c):

- the walk shows devices under the tty: serport registers its serio port there while a read
  holds the line, and pulse8-cec's ``cec0`` and the remote's event node appear below it (the walk
  loads devices that own a node, so it sees those, not the port): nothing is opened;
- ``TIOCGETD`` on the opened tty reads ``N_MOUSE`` (or any discipline but ``N_TTY``): the tty
  core answers it in every discipline, and a tty's discipline lasts until its last close, so
  another open file holds the line, even when its reader has gone (the old instance between its
  holder's end and its own close). This is what a node meets: the port's children show only
  once a CEC driver bound, and serport answers every termios request with ``EINVAL`` (its ioctl
  takes ``SPIOCSTYPE`` alone), so configuring the line first would fail it;
- ``EINVAL`` from the termios calls when ``TIOCGETD``, asked again, reads ``N_MOUSE`` (the other
  switched the line in between);
- ``EBUSY`` from the open (the other set ``TIOCEXCL`` and this process lacks
  ``CAP_SYS_ADMIN``), or from the holder's read (serport lets one reader in).

Such an open closes at once, having set nothing (no ``TIOCNXCL``: the flag is the other's). A
Waiting line is tried at every walk; the port's ``remove`` uevent at the other's release wakes
one at once, and while a line is held with no port in the walk (the remove came and went, and a
tty's last close sends no uevent), the manager asks for a walk after 0.25 s, doubling to every
second, until the line is free.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from ..inventory.model import SerioEntry
from ..inventory.usb import serio_entry_matches
from ..sysfs.model import Snapshot, SysDevice
from .holder import BUSY

log = logging.getLogger(__name__)

# "WouldAttach" appears only in a dry run's preview.
SerioStateName = Literal["Attached", "Waiting", "Failed", "WouldAttach"]

# linux/tty.h, asm-generic/ioctls.h (x86, arm64, riscv share these numbers).
N_TTY = 0
N_MOUSE = 2
TIOCSETD = 0x5423
TIOCGETD = 0x5424
TIOCEXCL = 0x540C
TIOCNXCL = 0x540D


def _iow(kind: str, nr: int, size: int) -> int:
    """The kernel's _IOW(type, nr, size): write (1) << 30 | size << 16 | type << 8 | nr."""
    return (1 << 30) | (size << 16) | (ord(kind) << 8) | nr


ULONG = "L"  # C unsigned long, native size
SPIOCSTYPE = _iow("q", 0x01, struct.calcsize(ULONG))  # 0x40087101 on 64-bit
SERIO_PULSE8_CEC = 0x40
SERIO_RAINSHADOW_CEC = 0x41
SERIO_TYPES = {"pulse8-cec": SERIO_PULSE8_CEC, "rainshadow-cec": SERIO_RAINSHADOW_CEC}
BAUD = {"pulse8-cec": termios.B9600, "rainshadow-cec": termios.B9600}
HOLDER_MODULE = "liken_devices.machine.holder"
RELEASE_TIMEOUT = 5.0
# While a line another process holds shows no serio port, walks are asked for after these many
# seconds, doubling up to the last (rules: serial.across-restarts).
RETRY_FIRST = 0.25
RETRY_MAX = 1.0


def line_settings(current: list[Any], protocol: str) -> list[Any]:
    """The termios attributes the protocol needs (step 2 above), from the line's current ones."""
    speed = BAUD[protocol]
    cc = list(current[6])
    cc[termios.VMIN] = 1
    cc[termios.VTIME] = 0
    iflag = termios.IGNBRK | termios.IGNPAR
    oflag = 0
    cflag = termios.CS8 | termios.CREAD | termios.CLOCAL | termios.HUPCL | speed
    lflag = 0
    return [iflag, oflag, cflag, lflag, speed, speed, cc]


class Holder(Protocol):
    """A running reader that keeps one attachment's serio port registered."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...

    def release(self) -> None: ...

    def exit_message(self) -> str: ...


class LineOps:
    """The system calls the attachment makes. Tests subclass it to record (and delegate)."""

    def open(self, path: str) -> int:
        return os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)

    def rdev(self, fd: int) -> int:
        return os.fstat(fd).st_rdev

    def tcgetattr(self, fd: int) -> list[Any]:
        return termios.tcgetattr(fd)

    def tcsetattr(self, fd: int, when: int, attrs: list[Any]) -> None:
        termios.tcsetattr(fd, when, attrs)

    def set_blocking(self, fd: int) -> None:
        os.set_blocking(fd, True)

    def ioctl(self, fd: int, request: int, arg: bytes) -> None:
        fcntl.ioctl(fd, request, arg)

    def get_ldisc(self, fd: int) -> int:
        """The tty's line discipline (TIOCGETD, answered by the tty core in any discipline)."""
        out = fcntl.ioctl(fd, TIOCGETD, struct.pack("i", 0))
        return int(struct.unpack("i", out)[0])

    def close(self, fd: int) -> None:
        os.close(fd)

    def spawn_holder(self, fd: int) -> Holder:
        return ProcessHolder.start(fd)


class ProcessHolder:
    """:mod:`.holder` run as a child process, with a lifeline pipe the agent keeps open."""

    def __init__(self, proc: subprocess.Popen[bytes], lifeline: int) -> None:
        self.proc = proc
        self.pid = proc.pid
        self._lifeline: int | None = lifeline
        self._message: str | None = None

    @staticmethod
    def start(fd: int, *, module: str = HOLDER_MODULE,
              env: Mapping[str, str] | None = None) -> ProcessHolder:
        """``python -m module TTY_FD LIFE_FD`` (the holder; a test names its stand-in)."""
        life_r, life_w = os.pipe()  # both O_CLOEXEC: no other child inherits the write end
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", module, str(fd), str(life_r)],
                pass_fds=(fd, life_r), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, start_new_session=True, env=env)
        except BaseException:
            os.close(life_w)
            raise
        finally:
            os.close(life_r)
        return ProcessHolder(proc, life_w)

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self) -> int:
        return self.proc.wait()

    def release(self) -> None:
        """End the attachment: close the lifeline; kill the reader if it does not go."""
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        try:
            self.proc.wait(RELEASE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.exit_message()

    def exit_message(self) -> str:
        if self._message is None:
            if self.proc.poll() is None:
                return ""
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
            if self.proc.stderr:
                self.proc.stderr.close()
            self._message = " ".join(err.split()) or f"holder exited with {self.proc.returncode}"
        return self._message


@dataclass(frozen=True, slots=True)
class Adapter:
    """A tty that matches an entry, as the walk saw it."""

    tty: str  # kernel name, "ttyACM0"
    tty_path: str  # sysfs path of the tty device
    devnode: str  # "/dev/ttyACM0"
    rdev: int | None  # the tty's device numbers, to check that the opened file is this tty
    generation: tuple[str, ...]  # changes when the adapter is plugged in again
    # serport registered a serio port under the tty: a process reads the line in N_MOUSE.
    port_registered: bool = field(default=False, compare=False)


def _port_registered(tty_path: str, snapshot: Snapshot) -> bool:
    """Whether the walk shows serport's serio port under the tty.

    A tty has no child device of its own; what sits under one is the port serport registers
    while a read holds the line, and what binds to it (pulse8-cec's ``cec0``, the remote's
    ``rc``/``input``). The walk loads the devices that own a node, so the port itself (which
    owns none) shows only through those; the port alone, with no driver bound, shows nothing,
    and the line discipline the open reads tells (:meth:`SerioManager._attach`).
    """
    prefix = tty_path + "/"
    return any(p.startswith(prefix) for p in snapshot.devices)


def find_adapters(entry: SerioEntry, snapshot: Snapshot, dev_root: Path) -> list[Adapter]:
    """Every ``ttyACM*`` under a USB interface whose USB device matches the entry's IDs."""
    found: list[Adapter] = []
    ttys = [d for d in snapshot.devices.values()
            if d.subsystem == "tty" and d.name.startswith("ttyACM")]
    for dev in sorted(ttys, key=lambda d: d.path):
        usb: SysDevice | None = None
        for path in dev.ancestors():
            parent = snapshot.get(path)
            if parent is not None and parent.devtype == "usb_device":
                usb = parent
                break
        if usb is None:
            continue
        if not serio_entry_matches(entry, usb):
            continue
        node = dev.node
        devnode = str(dev_root / (node.name if node else dev.name))
        rdev = os.makedev(node.major, node.minor) if node else None
        generation = (dev.path, str(rdev), usb.attr("busnum") or usb.props.get("BUSNUM", ""),
                      usb.attr("devnum") or usb.props.get("DEVNUM", ""))
        found.append(Adapter(dev.name, dev.path, devnode, rdev, generation,
                             _port_registered(dev.path, snapshot)))
    return found


@dataclass
class _Line:
    """One attachment the node made or tried."""

    entry: SerioEntry
    adapter: Adapter
    state: SerioStateName
    message: str
    fd: int | None = None
    holder: Holder | None = None
    releasing: bool = False
    busy: bool = False  # another process held the line: tried again at the next walk


def _errtext(exc: BaseException) -> str:
    """The kernel's words for a failed call: ``[Errno 25] Inappropriate ioctl for device``.

    ``termios.error`` is not an ``OSError``; its arguments are the same (errno, text).
    """
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"[Errno {exc.errno}] {exc.strerror or os.strerror(exc.errno)}"
    if isinstance(exc, termios.error) and len(exc.args) == 2 and isinstance(exc.args[0], int):
        return f"[Errno {exc.args[0]}] {exc.args[1]}"
    return f"{type(exc).__name__}: {exc}"


@dataclass
class _Match:
    """What one pass found for the entries: the lines wanted (by entry and tty), the first entry
    that named each tty, the later entries naming a tty already taken, and the entries whose
    matching failed (with why)."""

    wanted: dict[tuple[SerioEntry, str], Adapter] = field(default_factory=dict)
    owner: dict[str, SerioEntry] = field(default_factory=dict)
    doubles: list[tuple[SerioEntry, Adapter]] = field(default_factory=list)
    broken: dict[SerioEntry, str] = field(default_factory=dict)


class SerioManager:
    """Keeps the attachments in line with ``spec.serio`` and what the walk sees."""

    def __init__(self, ops: LineOps | None = None, *, dev_root: Path = Path("/dev"),
                 on_change: Callable[[], None] | None = None) -> None:
        self.ops = ops or LineOps()
        self.dev_root = dev_root
        self.on_change = on_change
        self._lines: dict[tuple[SerioEntry, str], _Line] = {}
        self._entries: tuple[SerioEntry, ...] = ()
        self._lock = threading.RLock()
        self.attach_calls = 0  # how many attachments were attempted
        self._busy_lines = False  # a line another process held was seen at the last pass
        # The lines held elsewhere at the last pass and at this one, with what showed it.
        self._held: dict[tuple[SerioEntry, str], str] = {}
        self._held_now: dict[tuple[SerioEntry, str], str] = {}
        self._retry: threading.Timer | None = None
        self._retry_delay = RETRY_FIRST

    def apply(self, entries: Iterable[SerioEntry], snapshot: Snapshot,
              *, dry_run: bool = False) -> list[dict[str, str]]:
        """Attach what the entries name in this snapshot, release the rest; a row per entry
        (and per matched line) saying how it stands."""
        entries = tuple(dict.fromkeys(entries))
        with self._lock:
            if entries != self._entries:
                # A spec change is a reason to try again (docs/machine.md): forget old failures.
                for key, old in list(self._lines.items()):
                    if old.fd is None:
                        del self._lines[key]
                self._entries = entries
            for key, old in list(self._lines.items()):
                if old.busy:  # Waiting for another holder: tried again at every walk
                    del self._lines[key]
            match = self._match(entries, snapshot)
            for key, held in list(self._lines.items()):
                seen = match.wanted.get(key)
                if seen is None or seen.generation != held.adapter.generation:
                    self._release(held)  # removed from the spec, unplugged, or plugged in again
                    del self._lines[key]
            rows: list[dict[str, str]] = []
            self._held_now = {}
            for entry in entries:
                rows += self._rows(entry, match, dry_run)
            self._held = self._held_now
            self._busy_lines = any(r["state"] == "Waiting" and "tty" in r for r in rows)
            self._retry_later(any(line.busy for line in self._lines.values()))
            return rows

    def _retry_later(self, pending: bool) -> None:
        """Ask for walks while a line is held by another process and the walk shows no serio
        port (rules: serial.across-restarts).

        The port's ``remove`` uevent, which walks at once, has then come already or will not
        come: the other's holder ended but its last close is still to come (a slow exit), its
        attachment is under way, or no driver bound to the port. A tty's last close sends no
        uevent, so without these walks the line would wait for some unrelated one.
        """
        if not pending or self.on_change is None:
            if self._retry is not None:
                self._retry.cancel()
                self._retry = None
            self._retry_delay = RETRY_FIRST
            return
        if self._retry is not None:
            return  # a walk is asked for already
        delay, self._retry_delay = self._retry_delay, min(self._retry_delay * 2, RETRY_MAX)
        self._retry = threading.Timer(delay, self._retry_now)
        self._retry.daemon = True
        self._retry.name = "serio-retry"
        self._retry.start()

    def _retry_now(self) -> None:
        with self._lock:  # the next pass may ask again, however soon it runs
            self._retry = None
        if self.on_change is not None:
            self.on_change()

    def _held_elsewhere(self, key: tuple[SerioEntry, str], message: str) -> None:
        """Note a line held by another process at this pass; say so once, not at every walk."""
        if self._held.get(key) != message:
            log.info("serio %s %s", key[0].protocol, message)
        self._held_now[key] = message

    def waiting_for_release(self) -> bool:
        """Whether a line another process holds was seen at the last pass: then the release's
        ``remove`` uevent is worth a walk at once (docs/machine.md, "Upgrades and restarts")."""
        return self._busy_lines

    def _match(self, entries: tuple[SerioEntry, ...], snapshot: Snapshot) -> _Match:
        """Which line each entry names now; a line two entries name goes to the first."""
        match = _Match()
        for entry in entries:
            try:
                adapters = find_adapters(entry, snapshot, self.dev_root)
            except Exception as exc:  # this entry's row says it; the others go on
                match.broken[entry] = f"cannot match the adapters: {_errtext(exc)}"
                continue
            for adapter in adapters:
                if adapter.tty_path in match.owner:
                    match.doubles.append((entry, adapter))  # one line speaks one protocol
                    continue
                match.owner[adapter.tty_path] = entry
                match.wanted[(entry, adapter.tty_path)] = adapter
        return match

    def _rows(self, entry: SerioEntry, match: _Match, dry_run: bool) -> list[dict[str, str]]:
        """One entry's rows, attaching its lines that are not held yet (unless a dry run)."""
        if entry in match.broken:
            return [_row(entry, None, "Failed", match.broken[entry])]
        rows: list[dict[str, str]] = []
        keys = [k for k in match.wanted if k[0] == entry]
        mine = [a for e, a in match.doubles if e == entry]
        for adapter in mine:
            first = match.owner[adapter.tty_path]
            rows.append(_row(entry, adapter.tty, "Failed",
                             f"/dev/{adapter.tty} is already attached for the entry "
                             f"{first.protocol} {first.vendor}:{first.product}; a line "
                             "is attached once, with one protocol"))
        if not keys and not mine:
            rows.append(_row(entry, None, "Waiting", self._absent(entry)))
        for key in keys:
            adapter = match.wanted[key]
            line = self._lines.get(key)
            if line is None and adapter.port_registered:
                # Another process reads the line in serport (the old instance of the agent in
                # a surge upgrade): nothing is opened, so its line settings stay untouched.
                message = _busy_message(adapter.tty, "its serio port is registered under the tty")
                self._held_elsewhere(key, message)
                rows.append(_row(entry, adapter.tty, "Waiting", message))
                continue
            if line is None:
                if dry_run:
                    rows.append(_row(entry, adapter.tty, "WouldAttach",
                                     f"dry run: would attach /dev/{adapter.tty} "
                                     f"as {entry.protocol}"))
                    continue
                line = self._attach(entry, adapter)
                self._lines[key] = line
            try:
                self._check(line)
            except Exception as exc:  # the holder cannot be asked: say so, go on
                line.state = "Failed"
                line.message = f"cannot check the holder: {_errtext(exc)}"
            if line.busy:
                self._held_elsewhere(key, line.message)
            rows.append(_row(entry, line.adapter.tty, line.state, line.message))
        return rows

    def close(self) -> None:
        """Release every held line (the agent is stopping)."""
        with self._lock:
            self._retry_later(False)
            for line in self._lines.values():
                self._release(line)
            self._lines.clear()

    def held(self) -> list[str]:
        with self._lock:
            return [ln.adapter.tty for ln in self._lines.values() if ln.state == "Attached"]

    @staticmethod
    def _absent(entry: SerioEntry) -> str:
        serial = f" with serial {entry.serial}" if entry.serial is not None else ""
        return (f"no ttyACM* of a USB device {entry.vendor}:{entry.product}{serial} is present; "
                "attached when the adapter is plugged in")

    def _attach(self, entry: SerioEntry, adapter: Adapter) -> _Line:
        self.attach_calls += 1
        ops = self.ops
        path = adapter.devnode
        step = f"open {path}"
        fd: int | None = None
        exclusive = False
        try:
            try:
                fd = ops.open(path)
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                # tty_reopen(): another open holds the tty exclusive (TIOCEXCL) and this
                # process lacks CAP_SYS_ADMIN.
                raise _HeldElsewhere("it is exclusive to another open file (TIOCEXCL)") from exc
            if adapter.rdev is not None and ops.rdev(fd) != adapter.rdev:
                raise OSError(errno.ENODEV, "the file is no longer the tty the walk saw")
            step = f"read the line discipline of {path} (TIOCGETD)"
            self._free(fd)
            step = f"configure the line {path} (tcsetattr)"
            try:
                ops.tcsetattr(fd, termios.TCSANOW,
                              line_settings(ops.tcgetattr(fd), entry.protocol))
            except (termios.error, OSError) as exc:
                if _errno(exc) == errno.EINVAL:
                    # serport answers every termios request with EINVAL: another process may
                    # have switched the line since TIOCGETD (two attaching at once).
                    with contextlib.suppress(OSError):  # else the EINVAL is the row's
                        self._free(fd)
                raise
            ops.set_blocking(fd)
            step = f"TIOCEXCL on {path}"
            # No other open of the tty while it is attached (CAP_SYS_ADMIN excepted): a second
            # writer or a new line discipline would end the attachment (rules: serial.tty-withheld).
            ops.ioctl(fd, TIOCEXCL, b"")
            exclusive = True
            step = f"switch {path} to the serio line discipline (TIOCSETD N_MOUSE)"
            ops.ioctl(fd, TIOCSETD, struct.pack("i", N_MOUSE))
            step = f"set the serio type of {path} (SPIOCSTYPE {SERIO_TYPES[entry.protocol]:#04x})"
            ops.ioctl(fd, SPIOCSTYPE, struct.pack(ULONG, SERIO_TYPES[entry.protocol]))
            step = f"start the holder of {path}"
            holder = ops.spawn_holder(fd)
        except _HeldElsewhere as held:
            # Nothing of this open was set on the line; TIOCNXCL would clear the holder's flag.
            if fd is not None:
                self._close_fd(fd)
            return _Line(entry, adapter, "Waiting", _busy_message(adapter.tty, held.how),
                         busy=True)
        except Exception as exc:  # any failure is this line's Failed row
            # termios.error is not an OSError: without this, a tty held in another line
            # discipline took the whole machine side down and leaked the descriptor.
            if fd is not None:
                if exclusive:
                    # Another process may hold the tty open and keep its flags past our close.
                    with contextlib.suppress(OSError):
                        ops.ioctl(fd, TIOCNXCL, b"")
                self._close_fd(fd)
            hint = ""
            if "TIOCSETD" in step and getattr(exc, "errno", None) == errno.EINVAL:
                hint = (" (this kernel has no serio line discipline: serport, "
                        "CONFIG_SERIO_SERPORT)")
            message = (f"{step} failed: {_errtext(exc)}{hint}; tried again when the "
                       "adapter is plugged in again or spec.serio changes")
            log.warning("serio %s %s: %s", entry.protocol, adapter.tty, message)
            return _Line(entry, adapter, "Failed", message)
        line = _Line(entry, adapter, "Attached",
                     f"holding /dev/{adapter.tty} on the serio line discipline as "
                     f"{entry.protocol} (holder pid {holder.pid})", fd, holder)
        log.info("serio %s: attached %s", entry.protocol, adapter.tty)
        if self.on_change is not None:
            threading.Thread(target=self._watch, args=(line,), daemon=True,
                             name=f"serio-{adapter.tty}").start()
        return line

    def _free(self, fd: int) -> None:
        """Raise :class:`_HeldElsewhere` unless the tty is in N_TTY.

        A tty's line discipline belongs to the open tty and returns to N_TTY at its last close
        (the next first open starts in N_TTY). So a line that this instance does not hold and
        that reads another discipline is held by another open file: in N_MOUSE, serport's, a
        holder (the other instance of the agent during an upgrade) attached it.
        """
        ldisc = self.ops.get_ldisc(fd)
        if ldisc == N_MOUSE:
            raise _HeldElsewhere("it is in serport's line discipline (TIOCGETD reads N_MOUSE)")
        if ldisc != N_TTY:
            raise _HeldElsewhere(f"it is in line discipline {ldisc} (TIOCGETD)")

    def _watch(self, line: _Line) -> None:
        """Tell the agent when a holder ends on its own (an unplug hangs the line up)."""
        assert line.holder is not None
        line.holder.wait()
        if not line.releasing and self.on_change is not None:
            self.on_change()

    def _check(self, line: _Line) -> None:
        """An attachment whose holder ended is Failed until the adapter comes back."""
        if line.holder is None:
            return
        status = line.holder.poll()
        if status is None:
            return
        reason = line.holder.exit_message()
        line.holder = None
        if line.fd is not None:
            self._close_fd(line.fd)
            line.fd = None
        if status == BUSY:
            line.state, line.busy = "Waiting", True
            line.message = _busy_message(line.adapter.tty,
                                         "serport refused the holder's read with EBUSY "
                                         "(one reader)")
            return
        line.state = "Failed"
        line.message = (f"the attachment of /dev/{line.adapter.tty} ended: {reason}; tried again "
                        "when the adapter is plugged in again or spec.serio changes")
        log.warning("serio %s: %s", line.adapter.tty, line.message)

    def _release(self, line: _Line) -> None:
        line.releasing = True
        if line.holder is not None:
            try:
                line.holder.release()
            except Exception as exc:  # the descriptor below is closed all the same
                log.warning("serio %s: releasing the holder: %s", line.adapter.tty,
                            _errtext(exc))
            line.holder = None
        if line.fd is not None:
            # The last close of the tty returns it to N_TTY (the kernel frees its line
            # discipline with the tty); nothing else to undo.
            self._close_fd(line.fd)
            line.fd = None
        log.info("serio %s: released %s", line.entry.protocol, line.adapter.tty)

    def _close_fd(self, fd: int) -> None:
        try:
            self.ops.close(fd)
        except OSError as exc:
            log.info("closing a serial line: %s", exc)


class _HeldElsewhere(Exception):
    """Another open file holds the tty; ``how`` says what showed it."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


def _errno(exc: BaseException) -> int | None:
    """The errno of an OSError or of a ``termios.error`` (errno, text)."""
    if isinstance(exc, OSError):
        return exc.errno
    if exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


def _busy_message(tty: str, how: str = "") -> str:
    how = f": {how}" if how else ""
    return (f"/dev/{tty} is held by another process (the other instance of the agent during an "
            f"upgrade or restart){how}; attached when it lets go")


def _row(entry: SerioEntry, tty: str | None, state: SerioStateName,
         message: str) -> dict[str, str]:
    row = {"protocol": entry.protocol, "vendor": entry.vendor, "product": entry.product}
    if entry.serial is not None:
        row["serial"] = entry.serial
    if tty is not None:
        row["tty"] = tty
    row["state"] = state
    row["message"] = message
    return row


def failed_row(entry: SerioEntry, message: str) -> dict[str, str]:
    """The row of an entry whose whole pass failed."""
    return _row(entry, None, "Failed", message)
