"""rules: serial.across-restarts. A line that another instance holds in serport is Waiting, never
Failed, and is attached once that instance lets go, with no replug.

Two instances of the machine side act on one pty through the serport-held tty double
(tests/machine/serport_tty.py), which answers as a ttyACM does while serport holds it: TIOCGETD
reads N_MOUSE and the termios calls fail with EINVAL until the last file open on the tty is
closed, and serport lets one reader in. The walk's snapshot shows no serio port, as the agent's
walk shows none on a node (it reads the devices that own a node, and the port owns none).
"""

from __future__ import annotations

import errno
import os
import struct
import threading
import time
from pathlib import Path
from typing import Any

from liken_devices.machine.serio import (
    N_MOUSE,
    SERIO_PULSE8_CEC,
    SPIOCSTYPE,
    TIOCEXCL,
    TIOCSETD,
    SerioManager,
)
from liken_devices.machine.side import serio_condition
from liken_devices.sysfs.model import DevNode, Snapshot, SysDevice
from tests.machine.serport_tty import SerportOps, TtyState
from tests.machine.test_machine_serio import PULSE8, Pty, adapter_devices, plug
from tests.support.wait import wait_until


def snapshot(pty: Pty) -> Snapshot:
    return Snapshot(adapter_devices("1-2", "ttyACM0", pty, "2548", "1002", None, 5))


def held_elsewhere(rows: list[dict[str, str]]) -> bool:
    return ([(r.get("tty"), r["state"]) for r in rows] == [("ttyACM0", "Waiting")]
            and "held by another process" in rows[0]["message"]
            and serio_condition(rows, 1)["reason"] == "LineHeldElsewhere")


class OtherInstance:
    """The old instance between its holder's end and its own close: the tty open in N_MOUSE with
    its serio type set, no reader (so no port)."""

    def __init__(self, root: Path, path: str) -> None:
        self.ops = SerportOps(root)
        self.fd: int | None = self.ops.open(path)
        self.ops.ioctl(self.fd, TIOCEXCL, b"")
        self.ops.ioctl(self.fd, TIOCSETD, struct.pack("i", N_MOUSE))
        self.ops.ioctl(self.fd, SPIOCSTYPE, struct.pack("L", SERIO_PULSE8_CEC))

    def close(self) -> None:
        if self.fd is not None:
            self.ops.close(self.fd)
            self.fd = None


def test_a_line_another_instance_holds_is_waiting_then_attached_at_its_release(
        tmp_path: Path, pty: Pty) -> None:
    """The surge: the old instance's holder reads the line; the new instance's walks leave it
    Waiting and untouched; the old one's release is followed by the new one's attachment."""
    plug(tmp_path, "ttyACM0", pty)
    root = tmp_path / "kernel"
    state = TtyState(root, pty.rdev)
    old = SerioManager(SerportOps(root), dev_root=tmp_path)
    new = SerioManager(SerportOps(root), dev_root=tmp_path)
    try:
        assert old.apply((PULSE8,), snapshot(pty))[0]["state"] == "Attached"
        wait_until(lambda: state.port_registered, 10, "the old holder to read the line")
        for _ in range(3):  # every walk while the old one holds it
            rows = new.apply((PULSE8,), snapshot(pty))
            assert held_elsewhere(rows), rows
            assert new.waiting_for_release()
            assert new.held() == []
        # The old attachment is untouched: its holder reads, its type and exclusivity stand.
        assert old.apply((PULSE8,), snapshot(pty))[0]["state"] == "Attached"
        assert (state.ldisc, state.serio_type, state.exclusive) == (N_MOUSE, SERIO_PULSE8_CEC,
                                                                     True)
        assert state.port_registered

        old.close()  # the old pod's exit: the port goes, and the tty's last close
        rows = new.apply((PULSE8,), snapshot(pty))  # the walk the port's remove uevent wakes
        assert rows[0]["state"] == "Attached", rows
        assert not new.waiting_for_release()
        wait_until(lambda: state.port_registered, 10, "the new holder to read the line")
    finally:
        old.close()
        new.close()


def test_a_release_under_way_is_retried_without_a_uevent(tmp_path: Path, pty: Pty) -> None:
    """The port is gone but the old instance has not closed the tty yet (its exit is slow): the
    line is Waiting, and the new instance walks again on its own until the line is free, so it
    is attached within a second of the last close with no further uevent."""
    plug(tmp_path, "ttyACM0", pty)
    root = tmp_path / "kernel"
    other = OtherInstance(root, str(tmp_path / "ttyACM0"))
    wake = threading.Event()
    new = SerioManager(SerportOps(root), dev_root=tmp_path, on_change=wake.set)
    try:
        rows = new.apply((PULSE8,), snapshot(pty))
        assert held_elsewhere(rows), rows
        for _ in range(2):  # the manager asks for walks while the line is held
            assert wake.wait(5), "no walk asked for while the release is under way"
            wake.clear()
            assert held_elsewhere(new.apply((PULSE8,), snapshot(pty)))
        other.close()
        released = time.monotonic()
        while True:  # the agent's loop: a walk at each wake
            assert wake.wait(10), "no walk asked for after the release"
            wake.clear()
            rows = new.apply((PULSE8,), snapshot(pty))
            if rows[0]["state"] != "Waiting":
                break
        assert rows[0]["state"] == "Attached", rows
        assert time.monotonic() - released < 2.5  # the walks come at most a second apart
        assert not wake.wait(1.0)  # attached: no more walks asked for
    finally:
        other.close()
        new.close()


def test_held_is_told_apart_from_failed(tmp_path: Path, pty: Pty) -> None:
    """EINVAL from tcsetattr on a line in N_TTY (a driver refusing the settings) is a genuine
    failure: Failed with the kernel's words, not tried again at every walk."""
    plug(tmp_path, "ttyACM0", pty)

    class Refusing(SerportOps):
        def tcsetattr(self, fd: int, when: int, attrs: list[Any]) -> None:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    mgr = SerioManager(Refusing(tmp_path / "kernel"), dev_root=tmp_path)
    try:
        for _ in range(3):
            rows = mgr.apply((PULSE8,), snapshot(pty))
            assert rows[0]["state"] == "Failed"
            assert "(tcsetattr) failed: [Errno 22] Invalid argument" in rows[0]["message"]
            assert not mgr.waiting_for_release()
        assert mgr.attach_calls == 1
    finally:
        mgr.close()


def test_the_other_attaching_between_tiocgetd_and_termios(tmp_path: Path, pty: Pty) -> None:
    """Two instances attach at once: ours read N_TTY, then the other switched the line, and the
    termios call fails with EINVAL. The line is re-read: N_MOUSE, so Waiting, and the other's
    flags are left alone (no TIOCNXCL)."""
    plug(tmp_path, "ttyACM0", pty)
    root = tmp_path / "kernel"
    others: list[OtherInstance] = []

    class Racing(SerportOps):
        def get_ldisc(self, fd: int) -> int:
            seen = super().get_ldisc(fd)
            if not others:
                others.append(OtherInstance(root, str(tmp_path / "ttyACM0")))
            return seen

    mgr = SerioManager(Racing(root), dev_root=tmp_path)
    try:
        rows = mgr.apply((PULSE8,), snapshot(pty))
        assert held_elsewhere(rows), rows
        assert TtyState(root, pty.rdev).exclusive  # the other's TIOCEXCL stands
    finally:
        for o in others:
            o.close()
        mgr.close()


def test_an_exclusive_tty_an_unprivileged_instance_cannot_open(tmp_path: Path,
                                                                pty: Pty) -> None:
    """Without CAP_SYS_ADMIN the open of a tty another holds exclusive fails with EBUSY: held,
    so Waiting. Once free, serport itself refuses such an instance (EPERM): that is Failed."""
    plug(tmp_path, "ttyACM0", pty)
    root = tmp_path / "kernel"
    other = OtherInstance(root, str(tmp_path / "ttyACM0"))
    mgr = SerioManager(SerportOps(root, privileged=False), dev_root=tmp_path)
    try:
        assert held_elsewhere(mgr.apply((PULSE8,), snapshot(pty)))
        other.close()
        rows = mgr.apply((PULSE8,), snapshot(pty))
        assert rows[0]["state"] == "Failed"
        assert "(TIOCSETD N_MOUSE) failed: [Errno 1] Operation not permitted" in \
            rows[0]["message"]
    finally:
        other.close()
        mgr.close()


def test_a_line_in_another_discipline_is_held_elsewhere(tmp_path: Path, pty: Pty) -> None:
    """Any discipline other than N_TTY at our open means another file holds the tty in it (the
    discipline resets at the last close): Waiting, naming it; nothing switched."""
    plug(tmp_path, "ttyACM0", pty)
    root = tmp_path / "kernel"
    ops = SerportOps(root)
    fd = ops.open(str(tmp_path / "ttyACM0"))
    state = TtyState(root, pty.rdev)
    state.ldisc = 18  # N_PPS, which another program set
    mgr = SerioManager(SerportOps(root), dev_root=tmp_path)
    try:
        rows = mgr.apply((PULSE8,), snapshot(pty))
        assert held_elsewhere(rows), rows
        assert "line discipline 18" in rows[0]["message"]
        assert state.ldisc == 18
    finally:
        ops.close(fd)
        mgr.close()


def test_the_walk_shows_the_port_through_what_binds_to_it(tmp_path: Path, pty: Pty) -> None:
    """The walk loads the devices that own a node: of serport's port it shows pulse8-cec's cec0
    and the remote's event node under the tty, never the port itself. That is enough: Waiting,
    and the tty is not even opened."""
    plug(tmp_path, "ttyACM0", pty)
    devices = dict(snapshot(pty).devices)
    tty = next(p for p, d in devices.items() if d.subsystem == "tty")
    cec = f"{tty}/serio0/cec/cec0"
    devices[cec] = SysDevice(cec, "cec", None, {"MAJOR": "240", "MINOR": "0", "DEVNAME": "cec0"},
                             node=DevNode("cec0", "c", 240, 0))

    class Opens(SerportOps):
        opened = 0

        def open(self, path: str) -> int:
            Opens.opened += 1
            return super().open(path)

    mgr = SerioManager(Opens(tmp_path / "kernel"), dev_root=tmp_path)
    try:
        rows = mgr.apply((PULSE8,), Snapshot(devices))
        assert held_elsewhere(rows), rows
        assert "its serio port is registered" in rows[0]["message"]
        assert Opens.opened == 0
    finally:
        mgr.close()
