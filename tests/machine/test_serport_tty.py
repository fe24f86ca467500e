"""The serport-held tty double answers as the kernel does (tests/machine/serport_tty.py).

A test that leans on a stand-in is only as good as the stand-in, so its kernel facts are checked
here, through the calls the agent makes: one instance attaches a pty through it, and a second
opener then meets what it would meet on a ttyACM that serport holds.
"""

from __future__ import annotations

import errno
import struct
import termios
from pathlib import Path

import pytest

from liken_devices.machine.serio import (
    N_MOUSE,
    N_TTY,
    SERIO_PULSE8_CEC,
    SPIOCSTYPE,
    TIOCEXCL,
    TIOCSETD,
    SerioManager,
)
from liken_devices.sysfs.model import Snapshot
from tests.machine.serport_tty import SerportOps, TtyState
from tests.machine.test_machine_serio import PULSE8, Pty, adapter_devices, plug
from tests.support.wait import wait_until


def test_a_second_opener_of_a_held_tty_meets_serport(tmp_path: Path, pty: Pty) -> None:
    """Held: TIOCGETD reads N_MOUSE, termios fails with EINVAL, a second reader gets EBUSY, an
    unprivileged open of the exclusive tty gets EBUSY; after the last close all of it is gone."""
    plug(tmp_path, "ttyACM0", pty)
    root = tmp_path / "kernel"
    old = SerioManager(SerportOps(root), dev_root=tmp_path)
    snap = Snapshot(adapter_devices("1-2", "ttyACM0", pty, "2548", "1002", None, 5))
    state = TtyState(root, pty.rdev)
    try:
        assert old.apply((PULSE8,), snap)[0]["state"] == "Attached"
        wait_until(lambda: state.port_registered, 10, "the holder's read to register the port")
        assert (state.ldisc, state.serio_type, state.exclusive) == (N_MOUSE, SERIO_PULSE8_CEC,
                                                                     True)

        other = SerportOps(root)
        fd = other.open(str(tmp_path / "ttyACM0"))
        try:
            assert other.get_ldisc(fd) == N_MOUSE
            settings = termios.tcgetattr(pty.slave)
            for call in (lambda: other.tcgetattr(fd),
                         lambda: other.tcsetattr(fd, termios.TCSANOW, settings)):
                with pytest.raises(termios.error) as info:
                    call()
                assert info.value.args[0] == errno.EINVAL
            other.ioctl(fd, TIOCSETD, struct.pack("i", N_MOUSE))  # the same discipline: nothing
            second = other.spawn_holder(fd)
            assert second.wait() == 3  # the holder's BUSY: serport lets one reader in
            assert "[Errno 16]" in second.exit_message()
            assert state.port_registered  # the first reader still holds the port
        finally:
            other.close(fd)
        with pytest.raises(OSError) as busy:
            SerportOps(root, privileged=False).open(str(tmp_path / "ttyACM0"))
        assert busy.value.errno == errno.EBUSY  # TIOCEXCL, without CAP_SYS_ADMIN
    finally:
        old.close()
    assert not state.port_registered

    # The last close ended it all: the next open is a new tty in N_TTY, termios answers again.
    ops = SerportOps(root, privileged=False)
    fd = ops.open(str(tmp_path / "ttyACM0"))
    try:
        assert ops.get_ldisc(fd) == N_TTY
        assert ops.tcgetattr(fd)
        assert not state.exclusive
        with pytest.raises(OSError) as perm:
            ops.ioctl(fd, TIOCSETD, struct.pack("i", N_MOUSE))
        assert perm.value.errno == errno.EPERM  # serport_ldisc_open wants CAP_SYS_ADMIN
        with pytest.raises(OSError) as notty:
            ops.ioctl(fd, SPIOCSTYPE, struct.pack("L", SERIO_PULSE8_CEC))
        assert notty.value.errno == errno.ENOTTY  # n_tty has no SPIOCSTYPE
        ops.ioctl(fd, TIOCEXCL, b"")
        assert state.exclusive
    finally:
        ops.close(fd)


def test_the_discipline_lasts_until_the_last_close(tmp_path: Path, pty: Pty) -> None:
    """A file still open on the tty keeps it in N_MOUSE after the one that switched it closes."""
    plug(tmp_path, "ttyACM0", pty)
    root = tmp_path / "kernel"
    first, second = SerportOps(root), SerportOps(root)
    a = first.open(str(tmp_path / "ttyACM0"))
    first.ioctl(a, TIOCSETD, struct.pack("i", N_MOUSE))
    b = second.open(str(tmp_path / "ttyACM0"))
    first.close(a)
    assert second.get_ldisc(b) == N_MOUSE
    second.close(b)
    c = first.open(str(tmp_path / "ttyACM0"))
    assert first.get_ldisc(c) == N_TTY
    first.close(c)
