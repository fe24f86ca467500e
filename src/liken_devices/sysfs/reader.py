"""Walking a real sysfs tree (``/sys``, or a fixture under any root) into a Snapshot.

A full walk of ``/sys/devices`` visits tens of thousands of directories; the inventory needs a few
hundred. So the reader starts from the kernel's own indexes: ``bus/<bus>/devices`` for the buses
the seed considers (PCI, USB, and the board buses platform, ACPI, PNP), ``dev/char`` and
``dev/block`` for every device node, and ``class/bluetooth`` for radios (which own no node). Each
index entry is a symlink into ``devices/``; its target is resolved as a string, one ``readlink``
each. Per device it reads ``uevent`` (which already carries DRIVER, MODALIAS, PCI_ID, PRODUCT,
INTERFACE, MAJOR/MINOR, DEVNAME) and only the attributes the policy needs.

Sysfs changes under the reader: a device that vanishes mid-walk is skipped, an attribute that
cannot be read is left out, and each is logged and recorded in ``Snapshot.problems``.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

from .devnames import default_devname
from .model import DevNode, Snapshot, SysDevice

log = logging.getLogger(__name__)

BUSES = ("pci", "usb", "platform", "acpi", "pnp")
# Attributes read per kind of device (everything else comes from uevent).
USB_DEVICE_ATTRS = ("idVendor", "idProduct", "bDeviceClass", "serial", "manufacturer", "product",
                    "busnum", "devnum")
USB_INTERFACE_ATTRS = ("bInterfaceClass", "bInterfaceNumber")
PCI_FALLBACK_ATTRS = ("vendor", "device", "class", "modalias")


class _Walk:
    def __init__(self, root: Path) -> None:
        self.root = os.fspath(root)
        self.devices: dict[str, SysDevice] = {}
        self.problems: list[str] = []

    def problem(self, text: str) -> None:
        log.info("sysfs: %s", text)
        self.problems.append(text)

    def resolve(self, link: str) -> str | None:
        """The ``/devices/...`` path an index symlink points at, or None."""
        try:
            target = os.readlink(link)
        except FileNotFoundError:
            return None  # vanished between listdir and readlink
        except OSError as exc:
            self.problem(f"cannot read link {link}: {exc.strerror}")
            return None
        full = os.path.normpath(os.path.join(os.path.dirname(link), target))
        rel = full[len(self.root):] if full.startswith(self.root) else full
        return rel if rel.startswith("/devices/") else None

    def listdir(self, rel: str) -> list[str]:
        try:
            return sorted(os.listdir(self.root + rel))
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.problem(f"cannot list {rel}: {exc.strerror}")
            return []

    def read(self, rel: str) -> bytes | None:
        try:
            with open(self.root + rel, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENODEV):
                self.problem(f"cannot read {rel}: {exc.strerror}")
            return None

    def link_name(self, rel: str) -> str | None:
        try:
            return os.path.basename(os.readlink(self.root + rel))
        except OSError:
            return None

    def load(self, path: str, node_type: str | None = None, extra: tuple[str, ...] = ()) -> None:
        if path in self.devices:
            return
        raw = self.read(path + "/uevent")
        if raw is None:
            if not os.path.isdir(self.root + path):
                self.problem(f"{path} vanished during the walk; skipped")
                return
            raw = b""
        props: dict[str, str] = {}
        for line in raw.decode("utf-8", errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                props[key] = value
        subsystem = self.link_name(path + "/subsystem") or props.get("SUBSYSTEM")
        driver = self.link_name(path + "/driver") or props.get("DRIVER")
        names = list(extra)
        if subsystem == "usb":
            is_iface = props.get("DEVTYPE") == "usb_interface" or ":" in path.rsplit("/", 1)[-1]
            names += USB_INTERFACE_ATTRS if is_iface else USB_DEVICE_ATTRS
        elif subsystem == "pci" and "PCI_ID" not in props:
            names += PCI_FALLBACK_ATTRS
        attrs: dict[str, bytes] = {}
        for attr in names:
            content = self.read(f"{path}/{attr}")
            if content is not None:
                attrs[attr] = content.rstrip(b"\n")
        node = None
        if node_type is not None:
            node = self.node(path, node_type, subsystem, props, attrs)
        slaves: tuple[str, ...] = ()
        if node_type == "b" and path.startswith("/devices/virtual/"):
            slaves = tuple(self.listdir(path + "/slaves"))
        self.devices[path] = SysDevice(path, subsystem, driver, props, attrs, node, slaves)

    def node(self, path: str, node_type: str, subsystem: str | None, props: dict[str, str],
             attrs: dict[str, bytes]) -> DevNode | None:
        major, minor = props.get("MAJOR"), props.get("MINOR")
        if major is None or minor is None:
            dev = self.read(path + "/dev")
            if dev is None:
                return None
            major, _, minor = dev.decode(errors="replace").strip().partition(":")
        name = props.get("DEVNAME")
        if not name:
            busnum = attrs.get("busnum")
            devnum = attrs.get("devnum")
            name = default_devname(subsystem, path.rsplit("/", 1)[-1], props,
                                   busnum.decode() if busnum else None,
                                   devnum.decode() if devnum else None)
        try:
            numbers = int(major), int(minor)
        except ValueError:
            self.problem(f"{path}: bad device number {major}:{minor}")
            return None
        if not name:
            return None
        kind = "b" if node_type == "b" else "c"
        return DevNode(name.removeprefix("/dev/"), kind, *numbers)  # type: ignore[arg-type]

    def console(self) -> tuple[str, ...]:
        raw = self.read("/class/tty/console/active")
        if raw is None:
            return ()
        names = raw.decode(errors="replace").split()
        out: list[str] = []
        for name in names:
            out.append(name)
            if name == "tty0":
                # tty0 is "the current virtual terminal": follow it to the real one.
                active = self.read("/class/tty/tty0/active")
                if active:
                    out.extend(active.decode(errors="replace").split())
        return tuple(out)


def read_sysfs(root: Path | str = "/sys") -> Snapshot:
    """One walk of the sysfs tree under ``root``."""
    walk = _Walk(Path(root))
    # Device nodes first, so a usb_device is loaded with its node (usbfs) and its attributes.
    for kind, node_type in (("char", "c"), ("block", "b")):
        index = f"/dev/{kind}"
        for entry in walk.listdir(index):
            path = walk.resolve(f"{walk.root}{index}/{entry}")
            if path is not None:
                walk.load(path, node_type)
    for bus in BUSES:
        index = f"/bus/{bus}/devices"
        for entry in walk.listdir(index):
            path = walk.resolve(f"{walk.root}{index}/{entry}")
            if path is not None:
                walk.load(path)
    for entry in walk.listdir("/class/bluetooth"):
        path = walk.resolve(f"{walk.root}/class/bluetooth/{entry}")
        if path is not None:
            walk.load(path)
    return Snapshot(walk.devices, walk.console(), tuple(walk.problems))
