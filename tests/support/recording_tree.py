"""A umockdev recording written out as a real sysfs tree, for the tests.

What umockdev's testbed does: the device directories with ``uevent`` and attribute files, the
``driver`` and ``subsystem`` links, the ``bus/<bus>/devices`` and ``class/<class>`` indexes and
the ``dev/char``/``dev/block`` links. The tests use it to check that the recording reader
(``sysfs/umockdev.py``) and the sysfs walker (``sysfs/reader.py``) agree on one machine, and the
benchmarks to walk a real machine's tree; nothing in the package needs it.
"""

from __future__ import annotations

import os
from pathlib import Path

from liken_devices.sysfs.reader import BUSES
from liken_devices.sysfs.umockdev import block_device, parse_blocks

# Subsystems that are buses in sysfs (bus/<name>), the rest are classes (class/<name>).
BUS_SUBSYSTEMS = frozenset({
    "pci", "usb", "platform", "acpi", "pnp", "serio", "hid", "i2c", "spi", "scsi", "virtio", "mmc",
    "sdio", "nd", "dax", "gpio", "pci_express", "usb-serial", "mdio_bus", "cpu", "node", "memory",
    "container", "event_source", "clockevents", "clocksource", "workqueue", "xen", "bcma", "amba",
    "ac97", "hdaudio", "soundwire", "thunderbolt", "typec", "mei", "nvmem", "iio", "wmi", "host1x",
    "snd_seq", "serial", "serial-base", "edac", "machinecheck", "vmbus", "ccw", "css", "pcmcia",
    "ieee1394", "firewire", "media", "ishtp", "intel-ish-ipc", "auxiliary", "cxl", "faux", "sdw",
})


def materialize(text: str, root: Path, origin: str = "recording") -> None:
    """Write a recording out as a plain sysfs tree under ``root`` (what umockdev's testbed does).

    Creates the device directories with ``uevent`` and attribute files, the ``driver`` and
    ``subsystem`` links, the ``bus/<bus>/devices`` and ``class/<class>`` indexes and the
    ``dev/char``/``dev/block`` links; attributes a udevdb dump lacks are derived first.
    """
    for block in parse_blocks(text, origin):
        if not block.path.startswith("/devices/"):
            continue
        dev = block_device(block)
        d = root / dev.path.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        props = dict(block.props)
        if dev.node is not None:
            props.setdefault("DEVNAME", dev.node.name)
            props.setdefault("MAJOR", str(dev.node.major))
            props.setdefault("MINOR", str(dev.node.minor))
        if "DEVNAME" in props:
            props["DEVNAME"] = props["DEVNAME"].removeprefix("/dev/")
        if dev.driver and dev.subsystem in BUS_SUBSYSTEMS:
            props.setdefault("DRIVER", dev.driver)  # the kernel's uevent names a bound driver
        (d / "uevent").write_text("".join(f"{k}={v}\n" for k, v in props.items()
                                          if k != "SUBSYSTEM"))
        for key, value in dev.attrs.items():
            if key in ("uevent", "subsystem", "driver") or key.startswith("/") \
                    or ".." in key.split("/"):
                continue
            target = d / key
            if target.is_dir() or any(p.is_symlink() for p in (target, target.parent)):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(value + b"\n")
        sub = dev.subsystem
        if sub:
            # The kernel names a gpiochip's class device like the bus device it sits under; the
            # one inside a "gpio" directory is the class side.
            is_bus = sub in BUS_SUBSYSTEMS and not (sub == "gpio" and d.parent.name == "gpio")
            kind_dir = root / ("bus" if is_bus else "class") / sub
            _link(d / "subsystem", kind_dir)
            index = kind_dir / "devices" if is_bus else kind_dir
            _link(index / dev.name, d)
            if dev.driver and is_bus:
                drv = kind_dir / "drivers" / dev.driver
                drv.mkdir(parents=True, exist_ok=True)
                _link(d / "driver", drv)
        if dev.node is not None:
            kind = "block" if dev.node.type == "b" else "char"
            _link(root / "dev" / kind / f"{dev.node.major}:{dev.node.minor}", d)
    for bus in BUSES:
        (root / "bus" / bus / "devices").mkdir(parents=True, exist_ok=True)


def _link(at: Path, target: Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    if at.is_symlink() or at.exists():
        return
    at.symlink_to(os.path.relpath(target, at.parent))
