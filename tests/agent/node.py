"""A fixture node for the agent's tests: a built sysfs tree the walk reads, and real uevents.

The walk reads a tree the test controls (tests/support/sysfs_builder.py), while the kernel's
uevents are real (the kernel's "sysfs-uevent" ABI: an action written to a device's ``uevent``
file makes the kernel send that uevent, tagged ``SYNTH_UUID``), loop devices through
/dev/loop-control, zram hot_add/hot_remove, veth pairs. Everything created is removed by the
helpers' context managers.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

from liken_devices.inventory import Sources
from tests.support.sysfs_builder import Dev, SysfsBuilder

# A real device whose uevent file takes synthetic actions without touching the device
# (``echo add > /sys/class/tty/tty9/uevent``).
SYNTHETIC_TTY = Path("/sys/devices/virtual/tty/tty9/uevent")
LOOP_CTL_ADD = 0x4C80
LOOP_CTL_REMOVE = 0x4C81


def is_root() -> bool:
    return os.geteuid() == 0


class FixtureNode:
    """The machine the walk sees: a GPU at start, USB devices plugged and unplugged."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sysfs = root / "sys"
        self.builder = SysfsBuilder(self.sysfs)
        self.builder.console("ttyS0")
        self.facts = root / "facts"
        (self.facts / "storage").mkdir(parents=True)
        self.catalogs = root / "catalogs"
        self.catalogs.mkdir()
        self.gpu = self.builder.gpu()
        self.usb: dict[str, tuple[Dev, Dev]] = {}

    def sources(self) -> Sources:
        return Sources(sysfs=self.sysfs, facts=self.facts, modules_dir=self.catalogs,
                       hwdata_dir=self.catalogs)

    def args(self) -> list[str]:
        return ["--sysfs", str(self.sysfs), "--facts", str(self.facts),
                "--modules-dir", str(self.catalogs), "--hwdata-dir", str(self.catalogs)]

    def plug_usb(self, port: int, devnum: int | None = None) -> str:
        """A HID dongle on root port ``port``; returns the published device's name."""
        name = f"1-{port}"
        dev = self.builder.usb_device(name, devnum=devnum or port + 1)
        iface = self.builder.usb_interface(dev, "1.0", driver="usbhid", cls=3)
        self.builder.node(iface, "hidraw", f"hidraw{port}", 242, port, subdir="hidraw")
        self.usb[name] = (dev, iface)
        return f"usb-1-{port}-1-0"

    def unplug_usb(self, port: int) -> None:
        dev, iface = self.usb.pop(f"1-{port}")
        self.builder.remove(iface)
        self.builder.remove(dev)

    def unplug_gpu(self) -> None:
        self.builder.remove(self.gpu)


def synthetic_uevent(action: str) -> str:
    """A real kernel uevent for a virtual tty (the tty is not touched); returns its SYNTH_UUID.

    Only ``add``, ``remove``, ``bind``, ``unbind`` and ``move`` wake the agent's walk."""
    tag = str(uuid.uuid4())
    SYNTHETIC_TTY.write_text(f"{action} {tag}\n")
    return tag


@contextlib.contextmanager
def loop_device() -> Iterator[int]:
    """A new loop device through /dev/loop-control (real add/remove uevents)."""
    fd = os.open("/dev/loop-control", os.O_RDWR)
    try:
        number = 200 + (os.getpid() % 50) * 4
        for candidate in range(number, number + 200):
            try:
                made = fcntl.ioctl(fd, LOOP_CTL_ADD, candidate)
                break
            except OSError:
                continue
        else:
            raise RuntimeError("no free loop number")
        try:
            yield made
        finally:
            with contextlib.suppress(OSError):
                fcntl.ioctl(fd, LOOP_CTL_REMOVE, made)
    finally:
        os.close(fd)


@contextlib.contextmanager
def zram_device() -> Iterator[int]:
    """A new zram device through hot_add (real add/remove uevents)."""
    number = int(Path("/sys/class/zram-control/hot_add").read_text())
    try:
        yield number
    finally:
        Path("/sys/class/zram-control/hot_remove").write_text(f"{number}\n")


@contextlib.contextmanager
def veth_pair() -> Iterator[str]:
    """A veth pair (uevents under /devices/virtual/net/, which must wake nothing)."""
    name = f"lkv{os.getpid() % 100000}{uuid.uuid4().hex[:3]}"[:15]
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"],
                   check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)
