"""A tty that serport holds, for tests: a pty answering the serial-line calls as a ``ttyACM`` does
once some program has attached it to the kernel's serio layer.

Why it exists: the kernels the tests run on have no serport line discipline, and a bare pty in
``N_TTY`` answers every call the way a free ``ttyACM`` does. So a test on a bare pty cannot meet
what an instance of the agent meets when another instance holds the line (a surge upgrade):
there the kernel refuses the termios calls. This module plays the kernel's part for the lines
the test opens through :class:`SerportOps`, from these facts (docs/machine.md, "A line that
serport holds"; drivers/tty/tty_io.c, drivers/tty/n_tty.c, drivers/tty/tty_ioctl.c,
drivers/input/serio/serport.c):

- ``tty_ioctl()`` answers ``TIOCSETD``, ``TIOCGETD``, ``TIOCEXCL`` and ``TIOCNXCL`` itself, in
  any line discipline; ``TIOCGETD`` reads the current discipline's number, ``N_MOUSE`` (2)
  while serport holds the tty.
- A request the tty driver (cdc-acm) does not take goes to the line discipline's ``ioctl``. n_tty
  hands the termios requests (``TCGETS``, ``TCSETS``, ``TCSETSW``, ``TCSETSF``, ...) on to
  ``tty_mode_ioctl()``; serport's ``serport_ldisc_ioctl()`` takes ``SPIOCSTYPE`` and returns
  ``-EINVAL`` for everything else. So while serport holds a tty, ``tcgetattr()`` and
  ``tcsetattr()`` fail with ``EINVAL``; ``SPIOCSTYPE`` on a tty in ``N_TTY`` fails with
  ``ENOTTY`` (n_tty's ``-ENOIOCTLCMD``).
- ``serport_ldisc_open()`` (``TIOCSETD N_MOUSE``) needs ``CAP_SYS_ADMIN`` (``EPERM``);
  switching to the discipline the tty already has changes nothing.
- ``serport_ldisc_read()`` lets one reader in (``SERPORT_BUSY``: a second ``read()`` fails with
  ``EBUSY``); the read registers the serio port, sleeps until the line hangs up or the reader is
  interrupted (the reading process exits), unregisters the port and returns 0. The bytes the
  line receives meanwhile go to the serio driver, not to the reader.
- The line discipline and the ``TIOCEXCL`` flag belong to the open tty: they last until the last
  file open on it is closed, and the next first open starts in ``N_TTY``, not exclusive. While
  the tty is exclusive, an open by a process without ``CAP_SYS_ADMIN`` fails with ``EBUSY``.

How the kernel's state is kept: one directory per tty (by device numbers) under a root that
every process of the test shares (the agents and their holders run as processes), with the
discipline, the serio type, the exclusive flag and the registered port as files. Each file the
double opens on a tty holds a shared ``flock`` on the tty itself, and a child that inherits the
descriptor (the holder) shares it, so "no file is open on the tty any more" is the kernel's own
answer: an exclusive lock succeeds. An open that finds no other file open is the first open,
and resets the tty's state. The one-reader rule is an exclusive ``flock`` on a file of the tty's
directory, held by the reading process (so a killed reader lets go, as the kernel's would).

The holder: ``python -m tests.machine.serport_tty TTY_FD LIFE_FD`` runs the real holder
(:mod:`liken_devices.machine.holder`) with its reads of the line answered as serport answers
them; :func:`hold` lets a caller add what the port's registration does (the agent tests write
the port into their sysfs tree and send its uevents).
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
import termios
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from liken_devices.machine import holder as real_holder
from liken_devices.machine.serio import (
    N_MOUSE,
    N_TTY,
    SPIOCSTYPE,
    TIOCEXCL,
    TIOCNXCL,
    TIOCSETD,
    Holder,
    LineOps,
    ProcessHolder,
)

REPO = Path(__file__).resolve().parents[2]
ROOT_ENV = "LIKEN_TEST_SERPORT_ROOT"  # the holder child's state root
HOLDER = "tests.machine.serport_tty"


def _oserror(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class TtyState:
    """What the kernel keeps for one open tty, shared by every process of the test."""

    def __init__(self, root: Path, rdev: int) -> None:
        self.dir = root / f"{os.major(rdev)}-{os.minor(rdev)}"
        self.dir.mkdir(parents=True, exist_ok=True)

    def _read(self, name: str) -> str | None:
        try:
            return (self.dir / name).read_text()
        except FileNotFoundError:
            return None

    def _write(self, name: str, value: str) -> None:
        tmp = self.dir / f".{name}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(value)
        tmp.replace(self.dir / name)

    def _drop(self, name: str) -> None:
        (self.dir / name).unlink(missing_ok=True)

    def reset(self) -> None:
        """A first open: a new tty, in N_TTY, not exclusive, no serio type, no port."""
        for name in ("ldisc", "type", "exclusive", "port"):
            self._drop(name)

    @property
    def ldisc(self) -> int:
        return int(self._read("ldisc") or N_TTY)

    @ldisc.setter
    def ldisc(self, value: int) -> None:
        self._write("ldisc", str(value))
        self._drop("type")

    @property
    def serio_type(self) -> int | None:
        text = self._read("type")
        return None if text is None else int(text)

    @serio_type.setter
    def serio_type(self, value: int) -> None:
        self._write("type", str(value))

    @property
    def exclusive(self) -> bool:
        return self._read("exclusive") is not None

    @exclusive.setter
    def exclusive(self, value: bool) -> None:
        if value:
            self._write("exclusive", "1")
        else:
            self._drop("exclusive")

    @property
    def port_registered(self) -> bool:
        """Whether serport's serio port is registered (a reader is in serport's read)."""
        return self._read("port") is not None

    @port_registered.setter
    def port_registered(self, value: bool) -> None:
        if value:
            self._write("port", str(os.getpid()))
        else:
            self._drop("port")

    def take_reader(self) -> int | None:
        """serport's SERPORT_BUSY: a descriptor holding the one-reader lock, or None if taken."""
        fd = os.open(self.dir / "reader", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd


class SerportOps(LineOps):
    """The agent's system calls on ttys as the kernel answers them with serport present.

    ``privileged``: the caller has ``CAP_SYS_ADMIN``, as the agent's container does (it may
    open an exclusive tty and switch a line to ``N_MOUSE``). ``holder_module``: the module the
    holder process runs (this one by default; the agent tests name theirs).
    """

    def __init__(self, root: Path, *, privileged: bool = True, holder_module: str = HOLDER,
                 env: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.privileged = privileged
        self.holder_module = holder_module
        self.env = env

    def state(self, fd: int) -> TtyState:
        return TtyState(self.root, os.fstat(fd).st_rdev)

    def open(self, path: str) -> int:
        fd = super().open(path)
        try:
            state = self.state(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                first = True
            except BlockingIOError:
                first = False
            if first:
                state.reset()
            fcntl.flock(fd, fcntl.LOCK_SH)  # held for as long as this file is open anywhere
            if not first and state.exclusive and not self.privileged:
                raise _oserror(errno.EBUSY)  # tty_reopen(): TTY_EXCLUSIVE
        except BaseException:
            os.close(fd)
            raise
        return fd

    def get_ldisc(self, fd: int) -> int:
        return self.state(fd).ldisc

    def tcgetattr(self, fd: int) -> list[Any]:
        if self.state(fd).ldisc == N_MOUSE:
            raise termios.error(errno.EINVAL, os.strerror(errno.EINVAL))
        return super().tcgetattr(fd)

    def tcsetattr(self, fd: int, when: int, attrs: list[Any]) -> None:
        if self.state(fd).ldisc == N_MOUSE:
            raise termios.error(errno.EINVAL, os.strerror(errno.EINVAL))
        super().tcsetattr(fd, when, attrs)

    def ioctl(self, fd: int, request: int, arg: bytes) -> None:
        state = self.state(fd)
        if request == TIOCSETD:
            wanted = int.from_bytes(arg[:4], sys.byteorder, signed=True)
            if wanted == state.ldisc:
                return
            if wanted == N_MOUSE and not self.privileged:
                raise _oserror(errno.EPERM)
            if wanted not in (N_TTY, N_MOUSE):
                raise _oserror(errno.EINVAL)  # no other discipline in this stand-in
            state.ldisc = wanted
            return
        if request == SPIOCSTYPE:
            if state.ldisc != N_MOUSE:
                raise _oserror(errno.ENOTTY)
            state.serio_type = int.from_bytes(arg, sys.byteorder)
            return
        if request in (TIOCEXCL, TIOCNXCL):
            state.exclusive = request == TIOCEXCL
            return
        super().ioctl(fd, request, arg)

    def spawn_holder(self, fd: int) -> Holder:
        env = {**os.environ, **(self.env or {}), ROOT_ENV: str(self.root)}
        paths = [str(REPO), str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        return ProcessHolder.start(fd, module=self.holder_module, env=env)


def hold(argv: list[str], root: Path, register: Callable[[], None] | None = None,
         unregister: Callable[[], None] | None = None) -> int:
    """The real holder, its reads of the line answered as serport answers them."""
    tty_fd = int(argv[0]) if argv and argv[0].isdigit() else -1
    state = TtyState(root, os.fstat(tty_fd).st_rdev) if tty_fd >= 0 else None
    real_read, real_exit = os.read, os._exit
    lock = threading.Lock()
    held: list[int] = []  # the reader lock's descriptor while the port is registered

    def end_read() -> None:
        with lock:
            if not held:
                return
            assert state is not None
            state.port_registered = False
            if unregister is not None:
                unregister()
            os.close(held.pop())

    def serport_read(fd: int, n: int) -> bytes:
        if fd != tty_fd or state is None or state.ldisc != N_MOUSE:
            return real_read(fd, n)  # n_tty's read
        reader = state.take_reader()
        if reader is None:
            raise _oserror(errno.EBUSY)
        with lock:
            held.append(reader)
            state.port_registered = True
            if register is not None:
                register()
        try:
            while True:  # what the line receives goes to the serio driver
                try:
                    if not real_read(fd, n):
                        break
                except OSError as exc:
                    if exc.errno != errno.EIO:  # a pty's hangup reads EIO
                        raise
                    break
        finally:
            end_read()
        return b""

    def exit_(code: int) -> None:  # the lifeline's os._exit interrupts the read: the port goes
        end_read()
        real_exit(code)

    os.read = serport_read
    os._exit = exit_  # type: ignore[assignment]
    try:
        return real_holder.main(argv)
    finally:
        end_read()
        os.read, os._exit = real_read, real_exit  # type: ignore[assignment]


def main() -> int:
    return hold(sys.argv[1:], Path(os.environ[ROOT_ENV]))


if __name__ == "__main__":
    sys.exit(main())
