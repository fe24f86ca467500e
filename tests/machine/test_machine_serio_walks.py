"""End to end with the inventory: a spec.serio adapter through attach, unplug, replug and removal.

A sysfs tree on disk (tests/support/sysfs_builder) holds a Pulse-Eight adapter whose ttyACM has
a pty's device numbers, so the machine side opens and configures a real line; the two serio
ioctls are stood in for (this kernel has no serport), and the test plays the kernel's part after
an attachment: the serio port appears under the tty, pulse8-cec binds it, the CEC adapter and the
remote's input device register. Each step is one walk followed by ``MachineSide.apply``, the
order the agent runs them in.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from liken_devices.inventory import Sources
from liken_devices.inventory.model import MachineSpec, SerioEntry
from liken_devices.machine.side import MachineSide
from tests.support.sysfs_builder import Dev, SysfsBuilder

from .test_machine_serio import Recorder

ENTRY = SerioEntry("pulse8-cec", "2548", "1002")


@pytest.fixture
def ptys() -> Iterator[list[tuple[int, int]]]:
    made: list[tuple[int, int]] = []
    yield made
    for pair in made:
        for fd in pair:
            with contextlib.suppress(OSError):
                os.close(fd)


def both_sides(tmp_path: Path, hwdata: Path) -> tuple[SysfsBuilder, Path, Sources, Recorder,
                                                      MachineSide]:
    """A sysfs tree and /dev under ``tmp_path``, the policy's Sources over them and the machine
    side acting on them through a recorder that fakes the serio line discipline."""
    b = SysfsBuilder(tmp_path / "sys")
    dev_root = tmp_path / "dev"
    dev_root.mkdir()
    sources = Sources(sysfs=b.root, facts=tmp_path / "facts", modules_dir=tmp_path / "modules",
                      hwdata_dir=hwdata)
    ops = Recorder(fake_serio=True)
    side = MachineSide(tmp_path / "modules", serio_opener=ops, dev_root=dev_root,
                       sys_root=b.root, proc_root=tmp_path / "proc")
    return b, dev_root, sources, ops, side


def plug(b: SysfsBuilder, dev_root: Path, ptys: list[tuple[int, int]], *, devnum: int,
         tty: str, serial: str = "P8-0001") -> tuple[Dev, Dev]:
    """The adapter arrives: USB device, CDC ACM interface, and its tty (a pty's numbers)."""
    master, slave = os.openpty()
    ptys.append((master, slave))
    rdev = os.fstat(slave).st_rdev
    usb = b.usb_device("1-2", vendor="2548", product="1002", devnum=devnum, serial=serial)
    iface = b.usb_interface(usb, "1.0", driver="cdc_acm", cls=0x02)
    line = b.node(iface, "tty", tty, os.major(rdev), os.minor(rdev), subdir="tty")
    link = dev_root / tty
    if link.is_symlink():
        link.unlink()
    link.symlink_to(os.ttyname(slave))
    return usb, line


def kernel_binds_cec(b: SysfsBuilder, line: Dev) -> None:
    """What serport + pulse8-cec register once the line is attached (serio port under the tty)."""
    port = b.device(line, "serio0", "serio", {"SERIO_TYPE": "02", "SERIO_PROTO": "40"},
                    driver="pulse8-cec")
    b.node(port, "cec", "cec0", 240, 0, subdir="cec")
    rc = b.device(port, "rc0", "rc", subdir="rc")
    inp = b.device(rc, "input7", "input", {"NAME": "Pulse-Eight CEC"})
    b.node(inp, "input", "event7", 13, 71, devname="input/event7")


def test_attach_unplug_replug_and_remove(tmp_path: Path, ptys: list[tuple[int, int]]) -> None:
    hwdata = tmp_path / "hwdata"
    hwdata.mkdir()
    b, dev_root, sources, ops, side = both_sides(tmp_path, hwdata)
    spec = MachineSpec(serio=(ENTRY,))
    try:
        usb, line = plug(b, dev_root, ptys, devnum=5, tty="ttyACM0")

        # Walk 1: the entry reserves the tty, so the serial line publishes nothing yet.
        inv = sources.walk(spec)
        assert not [d for d in inv.devices if d.source.startswith(usb.path)]
        status = side.apply(spec, sources.snapshot())
        assert [(r["tty"], r["state"]) for r in status["serio"]] == [("ttyACM0", "Attached")]
        assert status["conditions"][1]["status"] == "True"

        # The kernel binds the CEC driver to the new serio port; walk 2 publishes both devices.
        kernel_binds_cec(b, line)
        inv = sources.walk(spec)
        names = sorted(d.name for d in inv.devices if d.source.startswith(usb.path))
        assert names == ["usb-1-2-1-0-cec", "usb-1-2-1-0-input"]
        side.apply(spec, sources.snapshot())
        assert ops.calls.count(("spawn_holder",)) == 1  # still the one attachment

        # Unplugged: both devices leave the slice and the line is released.
        b.remove(usb)
        inv = sources.walk(spec)
        assert not [d for d in inv.devices if d.source.startswith(usb.path)]
        status = side.apply(spec, sources.snapshot())
        assert status["serio"][0]["state"] == "Waiting"
        assert status["conditions"][1]["reason"] == "AdapterAbsent"
        assert ops.holders[0].poll() is not None

        # Plugged in again; the kernel named the tty ttyACM1 this time. Attached again.
        usb, line = plug(b, dev_root, ptys, devnum=6, tty="ttyACM1")
        status = side.apply(spec, sources.snapshot())
        assert [(r["tty"], r["state"]) for r in status["serio"]] == [("ttyACM1", "Attached")]
        assert ops.holders[1].poll() is None

        # The entry is removed from the spec: released, and no serio row remains.
        status = side.apply(MachineSpec(), sources.snapshot())
        assert status["serio"] == []
        assert status["conditions"][1]["reason"] == "NoneDeclared"
        assert ops.holders[1].poll() is not None
    finally:
        side.close()


LONG_SERIAL = "P8-" + "0123456789abcdef" * 5  # 83 bytes: the published attribute is cut at 64


@pytest.mark.parametrize("written", ["full", "cut"])
def test_one_rule_names_a_serial_line_even_with_a_serial_longer_than_64_bytes(
        tmp_path: Path, ptys: list[tuple[int, int]], written: str) -> None:
    """rules: serial.one-matching-rule. An entry whose serial is the adapter's full
    serial (or the published, cut one) withholds the tty in the policy AND attaches the line on
    the machine side; neither side may name an adapter the other does not."""
    b, dev_root, sources, _, side = both_sides(tmp_path, tmp_path)
    try:
        usb, _ = plug(b, dev_root, ptys, devnum=5, tty="ttyACM0", serial=LONG_SERIAL)
        inv = sources.walk(MachineSpec())
        published = inv.by_name()["usb-1-2-1-0"].attributes["serial"]
        assert published == LONG_SERIAL[:64]
        serial = LONG_SERIAL if written == "full" else str(published)
        spec = MachineSpec(serio=(SerioEntry("pulse8-cec", "2548", "1002", serial),))
        inv = sources.walk(spec)
        assert not [n for d in inv.devices for n in d.nodes if n.name == "ttyACM0"]
        assert not [d for d in inv.devices if d.source.startswith(usb.path)]
        status = side.apply(spec, sources.snapshot())
        assert [(r["tty"], r["state"]) for r in status["serio"]] == [("ttyACM0", "Attached")]
        # Another serial names neither: the tty publishes and no line is attached.
        other = MachineSpec(serio=(SerioEntry("pulse8-cec", "2548", "1002", "P8-9999"),))
        assert "usb-1-2-1-0" in sources.walk(other).by_name()
        assert side.apply(other, sources.snapshot())["serio"][0]["state"] != "Attached"
    finally:
        side.close()
