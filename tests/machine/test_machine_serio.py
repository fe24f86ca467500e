"""spec.serio: the ioctl sequence and line settings on a pseudo-terminal, holding, replug, removal.

The adapter's ttyACM is stood in for by a pty slave: the walk's snapshot names the tty with the
pty's real device numbers, and /dev is a test directory whose ttyACM* links to the pty. The
system calls go through a recording layer that delegates to the real ones. This kernel has no
serio line discipline, so the real TIOCSETD N_MOUSE fails; one test asserts that failure as a
clear Failed state, and the others stand in for the two serio ioctls (recorded, not sent).
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import termios
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from liken_devices.inventory.model import MachineSpec, SerioEntry
from liken_devices.machine.serio import (
    N_MOUSE,
    SERIO_PULSE8_CEC,
    SERIO_RAINSHADOW_CEC,
    SPIOCSTYPE,
    TIOCEXCL,
    TIOCNXCL,
    TIOCSETD,
    Holder,
    LineOps,
    ProcessHolder,
    SerioManager,
    find_adapters,
)
from liken_devices.machine.side import MachineSide, serio_condition
from liken_devices.sysfs.model import DevNode, Snapshot, SysDevice

PULSE8 = SerioEntry("pulse8-cec", "2548", "1002")
RAINSHADOW = SerioEntry("rainshadow-cec", "1d50", "6016", "R12345")
USB = "/devices/pci0000:00/0000:00:14.0/usb1"


def test_constants_match_the_kernel_headers() -> None:
    """The numbers come from linux/serio.h, linux/tty.h and asm-generic/ioctls.h."""
    assert (TIOCSETD, N_MOUSE, TIOCEXCL) == (0x5423, 2, 0x540C)
    assert (SERIO_PULSE8_CEC, SERIO_RAINSHADOW_CEC) == (0x40, 0x41)
    # _IOW('q', 0x01, unsigned long): write, sizeof(unsigned long), 'q', 1.
    ulong = struct.calcsize("L")
    assert SPIOCSTYPE == (1 << 30) | (ulong << 16) | (0x71 << 8) | 0x01  # noqa: SIM300
    header = Path("/usr/include/linux/serio.h")
    if header.exists():
        text = header.read_text()
        assert "#define SERIO_PULSE8_CEC\t0x40" in text
        assert "#define SERIO_RAINSHADOW_CEC\t0x41" in text
        assert "_IOW('q', 0x01, unsigned long)" in text


@dataclass
class Pty:
    master: int
    slave: int  # kept open by the test so the pty lives while the manager reopens it
    name: str  # /dev/pts/N
    rdev: int


def new_pty(ptys: list[Pty]) -> Pty:
    master, slave = os.openpty()
    p = Pty(master, slave, os.ttyname(slave), os.fstat(slave).st_rdev)
    ptys.append(p)
    return p


def adapter_devices(port: str, tty: str, pty: Pty, vendor: str, product: str,
                    serial: str | None, devnum: int) -> dict[str, SysDevice]:
    """A USB-CEC adapter as a walk sees it: the USB device, its CDC ACM interface, its tty."""
    dev = f"{USB}/{port}"
    iface = f"{dev}/{port}:1.0"
    attrs = {"idVendor": vendor.encode(), "idProduct": product.encode(), "busnum": b"1",
             "devnum": str(devnum).encode()}
    if serial is not None:
        attrs["serial"] = serial.encode()
    return {
        dev: SysDevice(dev, "usb", "usb", {"DEVTYPE": "usb_device",
                                           "PRODUCT": f"{int(vendor, 16):x}/{int(product, 16):x}"
                                                      "/100",
                                           "BUSNUM": "001", "DEVNUM": f"{devnum:03d}"},
                       attrs, DevNode(f"bus/usb/001/{devnum:03d}", "c", 189, devnum)),
        iface: SysDevice(iface, "usb", "cdc_acm", {"DEVTYPE": "usb_interface",
                                                    "INTERFACE": "2/2/1"},
                         {"bInterfaceClass": b"02"}),
        f"{iface}/tty/{tty}": SysDevice(
            f"{iface}/tty/{tty}", "tty", None,
            {"MAJOR": str(os.major(pty.rdev)), "MINOR": str(os.minor(pty.rdev)), "DEVNAME": tty},
            node=DevNode(tty, "c", os.major(pty.rdev), os.minor(pty.rdev))),
    }


def plug(dev_root: Path, tty: str, pty: Pty) -> None:
    link = dev_root / tty
    if link.is_symlink():
        link.unlink()
    link.symlink_to(pty.name)


class Recorder(LineOps):
    """Records each system call and delegates to the real one.

    ``fake_serio``: TIOCSETD N_MOUSE and SPIOCSTYPE are recorded but not sent, standing in for
    the serport line discipline this kernel lacks. Everything else is real, the holder process
    included (it blocks reading the pty, as it would block in serport's read).
    """

    def __init__(self, fake_serio: bool) -> None:
        self.fake_serio = fake_serio
        self.calls: list[tuple[Any, ...]] = []
        self.holders: list[Holder] = []

    def open(self, path: str) -> int:
        fd = super().open(path)
        self.calls.append(("open", path))
        return fd

    def rdev(self, fd: int) -> int:
        self.calls.append(("rdev",))
        return super().rdev(fd)

    def get_ldisc(self, fd: int) -> int:
        self.calls.append(("get_ldisc",))
        return super().get_ldisc(fd)

    def tcgetattr(self, fd: int) -> list[Any]:
        self.calls.append(("tcgetattr",))
        return super().tcgetattr(fd)

    def tcsetattr(self, fd: int, when: int, attrs: list[Any]) -> None:
        self.calls.append(("tcsetattr", when, attrs[:6]))
        super().tcsetattr(fd, when, attrs)

    def set_blocking(self, fd: int) -> None:
        self.calls.append(("set_blocking",))
        super().set_blocking(fd)

    def ioctl(self, fd: int, request: int, arg: bytes) -> None:
        self.calls.append(("ioctl", request, arg))
        if self.fake_serio and request in (TIOCSETD, SPIOCSTYPE):
            return
        super().ioctl(fd, request, arg)

    def close(self, fd: int) -> None:
        self.calls.append(("close",))
        super().close(fd)

    def spawn_holder(self, fd: int) -> Holder:
        self.calls.append(("spawn_holder",))
        holder = super().spawn_holder(fd)
        self.holders.append(holder)
        return holder


def kernel_has_serport() -> bool:
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, TIOCSETD, struct.pack("i", N_MOUSE))
        return True
    except OSError:
        return False
    finally:
        os.close(slave)
        os.close(master)


def test_attach_sequence_and_line_settings(tmp_path: Path, ptys: list[Pty]) -> None:
    pty = new_pty(ptys)
    plug(tmp_path, "ttyACM0", pty)
    ops = Recorder(fake_serio=True)
    mgr = SerioManager(ops, dev_root=tmp_path)
    snap = Snapshot(adapter_devices("1-2", "ttyACM0", pty, "2548", "1002", None, 5))
    try:
        rows = mgr.apply((PULSE8,), snap)
        assert rows == [{"protocol": "pulse8-cec", "vendor": "2548", "product": "1002",
                         "tty": "ttyACM0", "state": "Attached",
                         "message": f"holding /dev/ttyACM0 on the serio line discipline as "
                                    f"pulse8-cec (holder pid {ops.holders[0].pid})"}]
        names = [c[0] for c in ops.calls]
        # The line discipline is asked before anything is set (rules: serial.across-restarts).
        assert names == ["open", "rdev", "get_ldisc", "tcgetattr", "tcsetattr", "set_blocking",
                         "ioctl", "ioctl", "ioctl", "spawn_holder"]
        assert ops.calls[0] == ("open", str(tmp_path / "ttyACM0"))
        assert ops.calls[4][1] == termios.TCSANOW
        assert ops.calls[6] == ("ioctl", TIOCEXCL, b"")
        assert ops.calls[7] == ("ioctl", TIOCSETD, struct.pack("i", N_MOUSE))
        assert ops.calls[8] == ("ioctl", SPIOCSTYPE, struct.pack("L", SERIO_PULSE8_CEC))

        # The line as the kernel now has it (read back through the test's own descriptor).
        iflag, oflag, cflag, lflag, ispeed, ospeed, cc = termios.tcgetattr(pty.slave)
        assert (ispeed, ospeed) == (termios.B9600, termios.B9600)
        assert cflag & termios.CSIZE == termios.CS8  # 8 data bits
        assert not cflag & (termios.PARENB | termios.CSTOPB | termios.CRTSCTS)  # N, 1, no RTS/CTS
        assert cflag & termios.CREAD and cflag & termios.CLOCAL and cflag & termios.HUPCL
        assert iflag == termios.IGNBRK | termios.IGNPAR
        assert not oflag & termios.OPOST
        assert not lflag & (termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN)
        assert (cc[termios.VMIN], cc[termios.VTIME]) == (1, 0)

        # The holder runs, blocked reading the line, and a second walk changes nothing.
        holder = ops.holders[0]
        assert holder.poll() is None
        assert os.readlink(f"/proc/{holder.pid}/fd/{_holder_tty_fd(holder)}") == pty.name
        assert mgr.apply((PULSE8,), snap)[0]["state"] == "Attached"
        assert mgr.attach_calls == 1
        assert mgr.held() == ["ttyACM0"]
    finally:
        mgr.close()
    assert ops.holders[0].poll() is not None  # released: the holder is gone
    assert ops.calls[-1] == ("close",)


def _holder_tty_fd(holder: Holder) -> str:
    assert isinstance(holder, ProcessHolder)
    return str(holder.proc.args[-2])  # python -m liken_devices.machine.holder TTY_FD LIFE_FD


def test_real_tiocsetd_on_this_kernel(tmp_path: Path, ptys: list[Pty]) -> None:
    """No ioctl is faked: on a kernel without serport the failure is a clear Failed state."""
    if kernel_has_serport():
        pytest.skip("this kernel has the serport line discipline; the failure path needs one "
                    "without it")
    pty = new_pty(ptys)
    plug(tmp_path, "ttyACM0", pty)
    ops = Recorder(fake_serio=False)
    mgr = SerioManager(ops, dev_root=tmp_path)
    snap = Snapshot(adapter_devices("1-2", "ttyACM0", pty, "2548", "1002", None, 5))
    try:
        for _ in range(4):  # four walks: one attempt, the same clear state each time
            rows = mgr.apply((PULSE8,), snap)
            assert rows[0]["state"] == "Failed"
            msg = rows[0]["message"]
            assert msg.startswith(f"switch {tmp_path}/ttyACM0 to the serio line discipline "
                                  f"(TIOCSETD N_MOUSE) failed: [Errno {errno.EINVAL}] ")
            assert "no serio line discipline" in msg and "CONFIG_SERIO_SERPORT" in msg
            assert "plugged in again or spec.serio changes" in msg
        assert mgr.attach_calls == 1
        assert ("spawn_holder",) not in ops.calls
        # The failed line is not kept open, nor left exclusive to others.
        assert ops.calls[-2:] == [("ioctl", TIOCNXCL, b""), ("close",)]
        assert mgr.held() == []
        cond = serio_condition(rows, 1)
        assert (cond["status"], cond["reason"]) == ("False", "AttachFailed")

        # A replug (a new USB device number) is a change: one new attempt.
        replug = Snapshot(adapter_devices("1-2", "ttyACM0", pty, "2548", "1002", None, 6))
        mgr.apply((PULSE8,), replug)
        mgr.apply((PULSE8,), replug)
        assert mgr.attach_calls == 2
        # So is a spec change.
        mgr.apply((PULSE8, RAINSHADOW), replug)
        assert mgr.attach_calls == 3
    finally:
        mgr.close()


def test_unplug_replug_on_another_tty_and_removal(tmp_path: Path, ptys: list[Pty]) -> None:
    first, second = new_pty(ptys), new_pty(ptys)
    plug(tmp_path, "ttyACM0", first)
    ops = Recorder(fake_serio=True)
    mgr = SerioManager(ops, dev_root=tmp_path)
    spec = (PULSE8,)
    try:
        assert mgr.apply(spec, Snapshot(adapter_devices("1-2", "ttyACM0", first, "2548", "1002",
                                                        None, 5)))[0]["state"] == "Attached"
        held = ops.holders[0]

        # Unplugged: the tty is gone from the walk. The line is released and the state says so.
        rows = mgr.apply(spec, Snapshot({}))
        assert held.poll() is not None
        assert rows == [{"protocol": "pulse8-cec", "vendor": "2548", "product": "1002",
                         "state": "Waiting",
                         "message": "no ttyACM* of a USB device 2548:1002 is present; attached "
                                    "when the adapter is plugged in"}]
        assert mgr.held() == []

        # Plugged in again, and the kernel named the tty ttyACM1 this time.
        (tmp_path / "ttyACM0").unlink()
        plug(tmp_path, "ttyACM1", second)
        rows = mgr.apply(spec, Snapshot(adapter_devices("1-2", "ttyACM1", second, "2548", "1002",
                                                        None, 7)))
        assert (rows[0]["tty"], rows[0]["state"]) == ("ttyACM1", "Attached")
        assert len(ops.holders) == 2 and ops.holders[1].poll() is None

        # The entry is removed from the spec: released, nothing reported.
        snap = Snapshot(adapter_devices("1-2", "ttyACM1", second, "2548", "1002", None, 7))
        assert mgr.apply((), snap) == []
        assert ops.holders[1].poll() is not None
        assert mgr.held() == []
    finally:
        mgr.close()


def test_holder_that_ends_on_its_own_is_reported_once(tmp_path: Path, ptys: list[Pty]) -> None:
    """A hangup ends the holder's read; the agent hears of it, and does not loop re-attaching."""
    pty = new_pty(ptys)
    plug(tmp_path, "ttyACM0", pty)
    ops = Recorder(fake_serio=True)
    changed = threading.Event()
    mgr = SerioManager(ops, dev_root=tmp_path, on_change=changed.set)
    snap = Snapshot(adapter_devices("1-2", "ttyACM0", pty, "2548", "1002", None, 5))
    try:
        mgr.apply((PULSE8,), snap)
        os.close(pty.slave)
        os.close(pty.master)  # the far end goes away: the line hangs up
        pty.master = pty.slave = -1
        assert changed.wait(30), "the agent was not told that the attachment ended"
        ops.holders[0].wait()
        for _ in range(3):
            rows = mgr.apply((PULSE8,), snap)
            assert rows[0]["state"] == "Failed"
            assert rows[0]["message"].startswith("the attachment of /dev/ttyACM0 ended: ")
        assert mgr.attach_calls == 1
    finally:
        mgr.close()


def test_the_opened_file_must_be_the_tty_the_walk_saw(tmp_path: Path, ptys: list[Pty]) -> None:
    seen, other = new_pty(ptys), new_pty(ptys)
    plug(tmp_path, "ttyACM0", other)  # /dev/ttyACM0 now names another device
    ops = Recorder(fake_serio=True)
    mgr = SerioManager(ops, dev_root=tmp_path)
    try:
        rows = mgr.apply((PULSE8,), Snapshot(adapter_devices("1-2", "ttyACM0", seen, "2548",
                                                              "1002", None, 5)))
        assert rows[0]["state"] == "Failed"
        assert "no longer the tty the walk saw" in rows[0]["message"]
        assert not any(c[0] == "tcsetattr" for c in ops.calls)
    finally:
        mgr.close()


def test_absent_device_node_is_failed_with_the_error(tmp_path: Path, ptys: list[Pty]) -> None:
    pty = new_pty(ptys)
    mgr = SerioManager(Recorder(fake_serio=True), dev_root=tmp_path)  # no /dev link at all
    rows = mgr.apply((PULSE8,), Snapshot(adapter_devices("1-2", "ttyACM0", pty, "2548", "1002",
                                                          None, 5)))
    assert rows[0]["state"] == "Failed"
    assert rows[0]["message"].startswith(f"open {tmp_path}/ttyACM0 failed: [Errno 2] ")
    mgr.close()


def test_matching_by_ids_serial_and_uevent_fallback(ptys: list[Pty]) -> None:
    a, b, c = new_pty(ptys), new_pty(ptys), new_pty(ptys)
    devices = {**adapter_devices("1-2", "ttyACM0", a, "2548", "1002", "P8-1", 5),
               **adapter_devices("1-3", "ttyACM1", b, "1d50", "6016", "R12345", 6),
               **adapter_devices("1-4", "ttyACM2", c, "1d50", "6016", "OTHER", 8)}
    # One adapter whose idVendor/idProduct attributes were not read: uevent PRODUCT still says.
    dev = devices[f"{USB}/1-2"]
    devices[dev.path] = SysDevice(dev.path, dev.subsystem, dev.driver, dev.props,
                                  {k: v for k, v in dev.attrs.items()
                                   if k not in ("idVendor", "idProduct")}, dev.node)
    snap = Snapshot(devices)
    dev_root = Path("/dev")
    assert [x.tty for x in find_adapters(PULSE8, snap, dev_root)] == ["ttyACM0"]
    assert [x.tty for x in find_adapters(RAINSHADOW, snap, dev_root)] == ["ttyACM1"]
    any_serial = SerioEntry("rainshadow-cec", "1d50", "6016")
    assert [x.tty for x in find_adapters(any_serial, snap, dev_root)] == ["ttyACM1", "ttyACM2"]
    assert find_adapters(SerioEntry("pulse8-cec", "2548", "1001"), snap, dev_root) == []
    found = find_adapters(PULSE8, snap, dev_root)[0]
    assert found.devnode == "/dev/ttyACM0"
    assert found.rdev == a.rdev


def test_machine_side_serio_fragment_and_close(tmp_path: Path, ptys: list[Pty]) -> None:
    pty = new_pty(ptys)
    plug(tmp_path, "ttyACM0", pty)
    ops = Recorder(fake_serio=True)
    side = MachineSide(tmp_path / "no-modules", serio_opener=ops, dev_root=tmp_path,
                       sys_root=tmp_path, proc_root=tmp_path)
    snap = Snapshot(adapter_devices("1-2", "ttyACM0", pty, "2548", "1002", None, 5))
    out = side.apply(MachineSpec(serio=(PULSE8, RAINSHADOW)), snap)
    states = [(r["protocol"], r["state"]) for r in out["serio"]]
    assert states == [("pulse8-cec", "Attached"), ("rainshadow-cec", "Waiting")]
    cond = out["conditions"][1]
    assert (cond["type"], cond["status"], cond["reason"]) == ("SerioAttached", "False",
                                                             "AdapterAbsent")
    assert "1d50:6016" in cond["message"]
    out = side.apply(MachineSpec(serio=(PULSE8,)), snap)
    assert out["conditions"][1]["status"] == "True"
    side.close()
    assert ops.holders[0].poll() is not None
    assert side.serio.held() == []


def test_two_entries_matching_one_line(tmp_path: Path, ptys: list[Pty]) -> None:
    """A line is attached once: a second entry matching the same tty is Failed, not attached."""
    pty = new_pty(ptys)
    plug(tmp_path, "ttyACM0", pty)
    ops = Recorder(fake_serio=True)
    mgr = SerioManager(ops, dev_root=tmp_path)
    other = SerioEntry("rainshadow-cec", "2548", "1002")
    snap = Snapshot(adapter_devices("1-2", "ttyACM0", pty, "2548", "1002", None, 5))
    try:
        rows = mgr.apply((PULSE8, other), snap)
        assert [(r["protocol"], r["state"]) for r in rows] == [("pulse8-cec", "Attached"),
                                                               ("rainshadow-cec", "Failed")]
        assert "already attached for the entry pulse8-cec 2548:1002" in rows[1]["message"]
        assert mgr.attach_calls == 1
    finally:
        mgr.close()


# -- a line another process holds (docs/machine.md, "Upgrades and restarts") ----------------------


def with_port(devices: dict[str, SysDevice]) -> dict[str, SysDevice]:
    """What serport registers under the tty while a process reads the line."""
    tty = next(p for p, d in devices.items() if d.subsystem == "tty")
    port = f"{tty}/serio0"
    return {**devices, port: SysDevice(port, "serio", "pulse8-cec", {"SERIO_PROTO": "40"})}


class BusyHolder:
    """A holder whose read failed as serport fails a second reader: status BUSY."""

    pid = 0

    def poll(self) -> int | None:
        return 3

    def wait(self) -> int:
        return 3

    def release(self) -> None:
        pass

    def exit_message(self) -> str:
        return "read on the line failed: [Errno 16] Device or resource busy"


def test_a_line_another_process_holds_is_waiting_and_untouched(tmp_path: Path,
                                                               ptys: list[Pty]) -> None:
    pty = new_pty(ptys)
    plug(tmp_path, "ttyACM0", pty)
    ops = Recorder(fake_serio=True)
    mgr = SerioManager(ops, dev_root=tmp_path)
    plain = adapter_devices("1-2", "ttyACM0", pty, "2548", "1002", None, 5)
    try:
        for _ in range(3):  # every walk while the other holds it: Waiting, nothing opened
            rows = mgr.apply((PULSE8,), Snapshot(with_port(plain)))
            assert [(r["tty"], r["state"]) for r in rows] == [("ttyACM0", "Waiting")]
            assert "held by another process" in rows[0]["message"]
            assert ops.calls == []
            assert mgr.waiting_for_release()
            assert serio_condition(rows, 1)["reason"] == "LineHeldElsewhere"
        rows = mgr.apply((PULSE8,), Snapshot(plain))  # released: the port is gone
        assert rows[0]["state"] == "Attached"
        assert not mgr.waiting_for_release()
    finally:
        mgr.close()


def test_a_holder_refused_with_ebusy_is_waiting_and_tried_at_every_walk(
        tmp_path: Path, ptys: list[Pty]) -> None:
    """The other reader came first (the walk did not see its port yet): serport's EBUSY is
    Waiting, never Failed, and the next walk tries again."""
    pty = new_pty(ptys)
    plug(tmp_path, "ttyACM0", pty)
    busy = [True]

    class Ops(Recorder):
        def spawn_holder(self, fd: int) -> Holder:
            if busy[0]:
                self.calls.append(("spawn_holder",))
                return BusyHolder()
            return super().spawn_holder(fd)

    ops = Ops(fake_serio=True)
    mgr = SerioManager(ops, dev_root=tmp_path)
    snap = Snapshot(adapter_devices("1-2", "ttyACM0", pty, "2548", "1002", None, 5))
    try:
        for attempt in (1, 2):
            rows = mgr.apply((PULSE8,), snap)
            assert rows[0]["state"] == "Waiting", rows
            assert "held by another process" in rows[0]["message"]
            assert mgr.attach_calls == attempt
        busy[0] = False
        assert mgr.apply((PULSE8,), snap)[0]["state"] == "Attached"
        assert mgr.attach_calls == 3
    finally:
        mgr.close()


def test_holder_exits_busy_on_ebusy(monkeypatch: pytest.MonkeyPatch) -> None:
    """serport_ldisc_read returns EBUSY to a second reader: the holder's status says so."""
    from liken_devices.machine import holder

    r, w = os.pipe()
    monkeypatch.setattr(holder, "_watch_lifeline", lambda fd: None)

    def read(fd: int, n: int) -> bytes:
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))

    monkeypatch.setattr(holder.os, "read", read)
    try:
        assert holder.main([str(r), str(w)]) == holder.BUSY == 3
        monkeypatch.setattr(holder.os, "read", lambda fd, n: (_ for _ in ()).throw(
            OSError(errno.EIO, "Input/output error")))
        assert holder.main([str(r), str(w)]) == 1
    finally:
        os.close(r)
        os.close(w)
