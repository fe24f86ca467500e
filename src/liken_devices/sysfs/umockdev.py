"""Reading umockdev recordings (the text format of ``umockdev-record``) as snapshots.

An operator records a machine once (``umockdev-record --all > machine.umockdev``) and anyone can
ask what it would publish (``liken-devices scan --recording``). A file is a sequence of blocks, one
per device, separated by blank lines: ``P:`` the path under /sys, ``N:`` the node under /dev
(optionally ``=HEX`` content), ``S:`` a /dev symlink, ``E:`` a uevent/udev property, ``A:`` a text
attribute (C-escaped), ``H:`` a binary attribute (hex), ``L:`` a symlink in the device directory.

Recordings made from ``udevadm info --export-db`` carry only ``P: N: S: E:``; what a sysfs walker
would read from attribute files is then derived from the properties (DRIVER, PCI_ID, PRODUCT,
INTERFACE, BUSNUM/DEVNUM, MAJOR/MINOR), so the policy sees the same snapshot either way.

:func:`materialize` writes a recording out as a real sysfs tree (devices, bus/class indexes,
``dev/char`` links), which the tests use to check that both readers agree.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .devnames import default_devname
from .model import DevNode, Snapshot, SysDevice
from .reader import BUSES

log = logging.getLogger(__name__)

_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", '"': b'"', "a": b"\a", "b": b"\b",
            "f": b"\f", "v": b"\v", "'": b"'", "?": b"?"}
# Subsystems that are buses in sysfs (bus/<name>), the rest are classes (class/<name>).
BUS_SUBSYSTEMS = frozenset({
    "pci", "usb", "platform", "acpi", "pnp", "serio", "hid", "i2c", "spi", "scsi", "virtio", "mmc",
    "sdio", "nd", "dax", "gpio", "pci_express", "usb-serial", "mdio_bus", "cpu", "node", "memory",
    "container", "event_source", "clockevents", "clocksource", "workqueue", "xen", "bcma", "amba",
    "ac97", "hdaudio", "soundwire", "thunderbolt", "typec", "mei", "nvmem", "iio", "wmi", "host1x",
    "snd_seq", "serial", "serial-base", "edac", "machinecheck", "vmbus", "ccw", "css", "pcmcia",
    "ieee1394", "firewire", "media", "ishtp", "intel-ish-ipc", "auxiliary", "cxl", "faux", "sdw",
})


def c_unescape(text: str) -> bytes:
    """Undo C/GLib escapes (``g_strcompress``): ``\\n``, ``\\\\``, octal ``\\NNN``."""
    if "\\" not in text:
        return text.encode("utf-8", errors="surrogateescape")
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "\\" or i + 1 >= n:
            out += ch.encode("utf-8", errors="surrogateescape")
            i += 1
            continue
        nxt = text[i + 1]
        if nxt in "01234567":
            j = i + 1
            while j < n and j < i + 4 and text[j] in "01234567":
                j += 1
            out.append(int(text[i + 1:j], 8) & 0xFF)
            i = j
        else:
            out += _ESCAPES.get(nxt, nxt.encode("utf-8", errors="surrogateescape"))
            i += 2
    return bytes(out)


@dataclass
class Block:
    """One device block of a recording, as written."""

    path: str
    node: str | None = None
    node_content: bytes | None = None
    symlinks: list[str] = field(default_factory=list)
    props: dict[str, str] = field(default_factory=dict)
    attrs: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)


def parse_blocks(text: str, origin: str = "recording") -> Iterator[Block]:
    block: Block | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            if block is not None:
                yield block
                block = None
            continue
        kind, sep, rest = raw.partition(": ")
        if not sep:
            if raw.rstrip() in ("P:", "N:", "S:", "E:", "A:", "H:", "L:"):
                kind, rest = raw.rstrip()[0], ""
            else:
                raise ValueError(f"{origin}:{lineno}: not a umockdev line: {raw[:60]!r}")
        if kind == "P":
            if block is not None:
                yield block
            block = Block(rest.strip())
            continue
        if block is None:
            raise ValueError(f"{origin}:{lineno}: {kind}: line before any P: line")
        if kind == "N":
            name, eq, content = rest.partition("=")
            block.node = name.strip()
            if eq:
                try:
                    block.node_content = bytes.fromhex(content.strip())
                except ValueError:
                    block.node_content = None
        elif kind == "S":
            block.symlinks.append(rest.strip())
        elif kind == "E":
            key, _, value = rest.partition("=")
            block.props[key] = value
        elif kind == "A":
            key, _, value = rest.partition("=")
            block.attrs[key] = c_unescape(value)
        elif kind == "H":
            key, _, value = rest.partition("=")
            try:
                block.attrs[key] = bytes.fromhex(value.strip())
            except ValueError:
                log.info("%s:%d: bad hex in binary attribute %s", origin, lineno, key)
        elif kind == "L":
            key, _, value = rest.partition("=")
            block.links[key] = value.strip()
        else:
            raise ValueError(f"{origin}:{lineno}: unknown line type {kind!r}")
    if block is not None:
        yield block


def _derived_attrs(b: Block, subsystem: str | None) -> dict[str, bytes]:
    """Attributes a udevdb-only dump lacks, derived from the properties (SOURCES.md table)."""
    attrs = {k: v.rstrip(b"\n") for k, v in b.attrs.items()}
    p = b.props
    if subsystem == "pci":
        if "PCI_ID" in p and "vendor" not in attrs:
            ven, _, dev = p["PCI_ID"].partition(":")
            attrs["vendor"] = f"0x{ven.lower():0>4}".encode()
            attrs["device"] = f"0x{dev.lower():0>4}".encode()
        if "PCI_CLASS" in p and "class" not in attrs:
            attrs["class"] = f"0x{int(p['PCI_CLASS'], 16):06x}".encode()
    elif subsystem == "usb":
        if "PRODUCT" in p and "idVendor" not in attrs:
            parts = p["PRODUCT"].split("/")
            if len(parts) >= 2:
                attrs["idVendor"] = f"{int(parts[0], 16):04x}".encode()
                attrs["idProduct"] = f"{int(parts[1], 16):04x}".encode()
        if "TYPE" in p and "bDeviceClass" not in attrs:
            attrs["bDeviceClass"] = f"{int(p['TYPE'].split('/')[0]):02x}".encode()
        if "INTERFACE" in p and "bInterfaceClass" not in attrs:
            attrs["bInterfaceClass"] = f"{int(p['INTERFACE'].split('/')[0]):02x}".encode()
        for key, attr in (("BUSNUM", "busnum"), ("DEVNUM", "devnum")):
            if key in p and attr not in attrs:
                attrs[attr] = str(int(p[key])).encode()
    if "MODALIAS" in p and "modalias" not in attrs:
        attrs["modalias"] = p["MODALIAS"].encode()
    return attrs


def _to_device(b: Block) -> SysDevice:
    props = dict(b.props)
    if "DEVNAME" in props:
        props["DEVNAME"] = props["DEVNAME"].removeprefix("/dev/")
    subsystem = props.get("SUBSYSTEM") or None
    driver_link = b.links.get("driver")
    driver = os.path.basename(driver_link) if driver_link else props.get("DRIVER")
    attrs = _derived_attrs(b, subsystem)
    node = None
    major, minor = props.get("MAJOR"), props.get("MINOR")
    if (major is None or minor is None) and "dev" in attrs:
        major, _, minor = attrs["dev"].decode(errors="replace").strip().partition(":")
    if major is not None and minor is not None and major.strip().isdigit() \
            and minor.strip().isdigit():
        name = b.node or props.get("DEVNAME")
        if not name:
            busnum, devnum = attrs.get("busnum"), attrs.get("devnum")
            name = default_devname(subsystem, b.path.rsplit("/", 1)[-1], props,
                                   busnum.decode(errors="replace") if busnum else None,
                                   devnum.decode(errors="replace") if devnum else None,
                                   int(major))
        if name:
            node = DevNode(name, "b" if subsystem == "block" else "c", int(major), int(minor))
    return SysDevice(b.path.rstrip("/"), subsystem, driver, props, attrs, node)


def parse_recording(text: str, origin: str = "recording") -> Snapshot:
    devices: dict[str, SysDevice] = {}
    console: list[str] = []
    tty0_active: list[str] = []
    for block in parse_blocks(text, origin):
        if not block.path.startswith("/devices/"):
            continue
        dev = _to_device(block)
        if dev.path in devices:
            log.info("%s: %s recorded twice; the first block is kept", origin, dev.path)
            continue
        devices[dev.path] = dev
        if dev.path == "/devices/virtual/tty/console" and "active" in block.attrs:
            console = block.attrs["active"].decode(errors="replace").split()
        if dev.path == "/devices/virtual/tty/tty0" and "active" in block.attrs:
            tty0_active = block.attrs["active"].decode(errors="replace").split()
    # tty0 is "the current virtual terminal": follow it to the real one (decisions.md).
    names = [n for name in console for n in ([name, *tty0_active] if name == "tty0" else [name])]
    # Virtual block devices built on others (dm, md) are not described by recordings.
    return Snapshot(devices, tuple(names))


def load_recording(path: Path | str) -> Snapshot:
    p = Path(path)
    return parse_recording(p.read_text(encoding="utf-8", errors="surrogateescape"), str(p))


def materialize(text: str, root: Path, origin: str = "recording") -> None:
    """Write a recording out as a plain sysfs tree under ``root`` (what umockdev's testbed does).

    Creates the device directories with ``uevent`` and attribute files, the ``driver`` and
    ``subsystem`` links, the ``bus/<bus>/devices`` and ``class/<class>`` indexes and the
    ``dev/char``/``dev/block`` links; attributes a udevdb dump lacks are derived first.
    """
    for block in parse_blocks(text, origin):
        if not block.path.startswith("/devices/"):
            continue
        dev = _to_device(block)
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
            if key in ("uevent", "subsystem", "driver") or key.startswith("/"):
                continue
            target = d / key
            if target.is_dir() or any(p.is_symlink() for p in (target, target.parent)):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(value + b"\n")
        sub = dev.subsystem
        if sub:
            # A device named like its parent's "gpio" directory is the class side (SOURCES.md).
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
