"""Walking a real sysfs tree (``/sys``, or a fixture under any root) into a Snapshot.

A full walk of ``/sys/devices`` visits tens of thousands of directories; the inventory needs a few
hundred. So the reader starts from the kernel's own indexes: ``bus/<bus>/devices`` for the buses
the rules consider (PCI, USB, and the board buses platform, ACPI, PNP; rules: hardware.considered),
``dev/char`` and ``dev/block`` for every device node, and ``class/bluetooth`` for radios (which own
no node). Each index entry is a symlink into ``devices/``; its target is resolved as a string, one
``readlink`` each. Per device it reads ``uevent`` (which already carries DRIVER, MODALIAS, PCI_ID,
PRODUCT, INTERFACE, MAJOR/MINOR, DEVNAME) and only the attributes the policy needs.

Sysfs changes under the reader: a device that vanishes mid-walk is skipped, an attribute that
cannot be read is left out, and each is logged and recorded in ``Snapshot.problems``.

A tree under any root is hostile until read (docs/inventory.md, "Bad input"): a file is opened
with ``O_NONBLOCK`` (a FIFO in an attribute's place does not block the walk), read only when it
is a regular file, and at most :data:`MAX_ATTR` bytes of it (a ``/dev/zero``-like file cannot
exhaust memory); a ``uevent`` is split on ``\n`` alone, its first value of a key wins (the
kernel writes MAJOR, MINOR, DEVNAME and DRIVER before any string a device supplies), and device
numbers and names are checked (:mod:`.values`). A root without the ``dev/char`` index is not a
sysfs tree: :class:`~liken_devices.errors.InputError`.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from collections.abc import Mapping
from pathlib import Path

from ..errors import InputError
from .devnames import default_devname
from .hci import hci_address
from .model import DevNode, Snapshot, SysDevice
from .usbbus import usb_role
from .values import dev_numbers, devname_problem

log = logging.getLogger(__name__)

# The board buses (devices the firmware or the board describes), stated once: the walk looks up
# a node's owners in their indexes and the inventory's hardware considers their devices.
BOARD_BUSES = ("platform", "acpi", "pnp")
BUSES = ("pci", "usb", *BOARD_BUSES)
# Attributes read per kind of device (everything else comes from uevent).
# The rest of a USB device's identity is in its uevent (PRODUCT, TYPE, BUSNUM, DEVNUM) and an
# interface's class in INTERFACE; only the descriptor strings need reading.
USB_DEVICE_ATTRS = ("serial", "manufacturer", "product")
USB_INTERFACE_ATTRS: tuple[str, ...] = ()
PCI_FALLBACK_ATTRS = ("vendor", "device", "class", "modalias")
# A PCI function's NUMA node is in no uevent (rules: attributes.topology).
PCI_ATTRS = ("numa_node",)
# A ttyS port's UART type: 0 is a placeholder with no UART behind it
# (rules: hardware.placeholder-serial).
SERIAL_PORT_ATTRS = ("type",)
_LEGACY_EVENT_NUMBERS = frozenset(f"13:{m}" for m in range(64, 96))
HCI_ATTRS = ("address",)  # an adapter's address: listed by kernels before 3.13 (sysfs.hci)
# A sysfs text attribute (and a uevent) is at most one page; 64 KiB covers any page size.
MAX_ATTR = 64 << 10
MAX_ENTRIES = 200_000  # entries of one directory listed (an index, a device's slaves)
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


Known = tuple[bytes, str | None, SysDevice]


class ReaderMemo:
    """What the last walks read, per (root, path): the uevent's bytes, how the device was found,
    and the device made of them.

    The uevent changes whenever the driver, the device number or the enumeration does (DRIVER,
    MAJOR/MINOR, DEVNAME, BUSNUM/DEVNUM), and the attributes read besides it (a USB device's
    descriptor strings) are fixed for one enumeration, so an unchanged uevent means an unchanged
    device. The subsystem of a path never changes (class devices live under a directory named
    for their class). Entries of paths a walk no longer finds are dropped. One memo belongs to
    whoever walks again (the inventory's ``Sources``); a walk without one reads everything.
    """

    MAX = 20000

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], Known] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> Known | None:
        return self._known.get(key)

    def put(self, key: tuple[str, str], value: Known) -> None:
        with self._lock:
            if len(self._known) > self.MAX:
                self._known.clear()
            self._known[key] = value

    def keep_only(self, root: str, paths: Mapping[str, object]) -> None:
        """Forget what earlier walks of ``root`` read of paths not in ``paths``."""
        with self._lock:
            for key in [k for k in self._known if k[0] == root and k[1] not in paths]:
                del self._known[key]


def _attributes_to_read(path: str, subsystem: str | None, props: dict[str, str]) -> list[str]:
    """The attribute files the policy reads of a device, beyond its uevent."""
    if subsystem == "usb":
        # A class device of the legacy usb class (hiddev0) is no bus device: nothing to read
        # (rules: usb.bus-devices-only).
        role = usb_role(path.rsplit("/", 1)[-1], props.get("DEVTYPE"))
        if role is None:
            return []
        return list(USB_INTERFACE_ATTRS if role == "usb_interface" else USB_DEVICE_ATTRS)
    if subsystem == "pci":
        return list(PCI_ATTRS if "PCI_ID" in props else PCI_FALLBACK_ATTRS + PCI_ATTRS)
    if subsystem == "tty" and path.rsplit("/", 1)[-1].startswith("ttyS"):
        return list(SERIAL_PORT_ATTRS)
    if subsystem == "bluetooth" and props.get("DEVTYPE") == "host":
        return list(HCI_ATTRS)
    return []


class _Walk:
    def __init__(self, root: Path, memo: ReaderMemo) -> None:
        self.root = os.fspath(root)
        self.memo = memo
        self.devices: dict[str, SysDevice] = {}
        self.problems: list[str] = []

    def problem(self, text: str) -> None:
        log.info("sysfs: %s", text)
        self.problems.append(text)

    def resolve(self, index: str, entry: str) -> str | None:
        """The ``/devices/...`` path an index symlink (``<index>/<entry>``) points at, or None.

        The kernel's index links are relative (``../../devices/...``): resolving them is string
        work, one ``readlink`` and no ``stat`` of each component.
        """
        link = f"{self.root}{index}/{entry}"
        try:
            target = os.readlink(link)
        except FileNotFoundError:
            return None  # vanished between listdir and readlink
        except OSError as exc:
            self.problem(f"cannot read link {link}: {exc.strerror}")
            return None
        if target.startswith("/"):
            full = os.path.normpath(target)
            rel = full[len(self.root):] if full.startswith(self.root) else full
        else:
            parts = index.split("/")
            while target.startswith("../") and len(parts) > 1:
                target = target[3:]
                parts.pop()
            rel = "/".join(parts) + "/" + target
            if "/." in rel:
                rel = os.path.normpath(rel)
        return rel if rel.startswith("/devices/") else None

    def listdir(self, rel: str) -> list[str]:
        try:
            names = os.listdir(self.root + rel)
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.problem(f"cannot list {rel}: {exc.strerror}")
            return []
        if len(names) > MAX_ENTRIES:
            # A kernel index never comes near this; a tree that does is not a sysfs.
            raise InputError(f"{self.root}{rel} lists {len(names)} entries, more than "
                             f"{MAX_ENTRIES}: not a sysfs tree")
        return sorted(names)

    def read(self, rel: str) -> bytes | None:
        """A regular file's bytes (at most :data:`MAX_ATTR`), or None with the problem noted.

        Three syscalls on the common path (open, one read, close): a sysfs attribute is produced
        whole by its first read, and one read of ``MAX_ATTR + 1`` bytes tells a file that is too
        large. Whatever is not a regular file cannot block (``O_NONBLOCK``) nor fill memory (the
        read is bounded); only an answer out of the ordinary (nothing, too much, an error) is
        looked at with ``fstat`` to say what the file is.
        """
        try:
            fd = os.open(self.root + rel, _READ_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENODEV):
                self.problem(f"cannot read {rel}: {exc.strerror}")
            return None
        try:
            try:
                data = os.read(fd, MAX_ATTR + 1)
            except OSError as exc:
                if not self._regular(fd, rel) or exc.errno in (errno.ENOENT, errno.ENODEV):
                    return None
                self.problem(f"cannot read {rel}: {exc.strerror}")
                return None
            if data and len(data) <= MAX_ATTR:
                return data
            if not self._regular(fd, rel):
                return None
            if len(data) > MAX_ATTR:
                self.problem(f"{rel} is larger than {MAX_ATTR} bytes; not read")
                return None
            return data
        finally:
            os.close(fd)

    def _regular(self, fd: int, rel: str) -> bool:
        """Whether ``fd`` is a regular file; a problem is noted when it is not."""
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
        except OSError:
            regular = False
        if not regular:
            self.problem(f"{rel} is not a regular file; not read")
        return regular

    def link_name(self, rel: str) -> str | None:
        try:
            return os.path.basename(os.readlink(self.root + rel))
        except OSError:
            return None

    def load(self, path: str, node_type: str | None = None, subsystem: str | None = None,
             numbers: str | None = None) -> None:
        """Read the device at ``path`` into this walk, reusing what an earlier walk read of it
        when that is still what the kernel shows."""
        if path in self.devices:
            return
        if numbers is not None and node_type == "c" and self._same_node(path, numbers):
            return
        raw = self.read(path + "/uevent")
        if raw is None:
            if not os.path.isdir(self.root + path):
                self.problem(f"{path} vanished during the walk; skipped")
                return
            raw = b""
        known = self.memo.get((self.root, path))
        # Virtual block devices are read again each time: their slaves can change (a device-mapper
        # table reload) while their uevent stays the same.
        virtual_block = node_type == "b" and path.startswith("/devices/virtual/")
        if known is not None and raw and known[0] == raw and known[1] == node_type \
                and not virtual_block and self._still_driven_alike(path, raw, known[2]):
            self.devices[path] = known[2]
            return
        if subsystem is None and known is not None:
            subsystem = known[2].subsystem
        dev = self._read_device(path, raw, node_type, subsystem, virtual_block)
        self.devices[path] = dev
        self.memo.put((self.root, path), (raw, node_type, dev))

    def _same_node(self, path: str, numbers: str) -> bool:
        """A class device's node (not a bus device's) at the same path with the same numbers
        (the index entry's name, "major:minor") is the same node: its uevent holds nothing else
        the policy reads, so it is reused without being read."""
        seen = self.memo.get((self.root, path))
        if seen is None or seen[1] != "c" or seen[2].node is None \
                or seen[2].subsystem in BUSES \
                or f"{seen[2].node.major}:{seen[2].node.minor}" != numbers:
            return False
        self.devices[path] = seen[2]
        return True

    def _still_driven_alike(self, path: str, raw: bytes, dev: SysDevice) -> bool:
        """A bus device's uevent names its driver once one is bound; where it names none, the
        driver link is the word (and a tree not written by the kernel may set only that)."""
        return b"DRIVER=" in raw or dev.subsystem not in BUSES or \
            self.link_name(path + "/driver") == dev.driver

    def _read_device(self, path: str, raw: bytes, node_type: str | None,
                     subsystem: str | None, virtual_block: bool) -> SysDevice:
        """A device as its uevent, links and attribute files say now."""
        props: dict[str, str] = {}
        for line in raw.decode("utf-8", errors="replace").split("\n"):
            key, sep, value = line.partition("=")
            if sep and key not in props:
                props[key] = value
        # The kernel's uevent file carries DRIVER when one is bound, but never SUBSYSTEM: that
        # comes from the index the device was found in, or from its subsystem link.
        if subsystem is None:
            subsystem = self.link_name(path + "/subsystem") or props.get("SUBSYSTEM")
        driver = props.get("DRIVER")
        if driver is None and subsystem in BUSES:
            driver = self.link_name(path + "/driver")
        attrs: dict[str, bytes] = {}
        for attr in _attributes_to_read(path, subsystem, props):
            content = self.read(f"{path}/{attr}")
            if content is not None:
                attrs[attr] = content.rstrip(b"\n")
        if subsystem == "bluetooth" and "address" not in attrs and self.root == "/sys" \
                and props.get("DEVTYPE") == "host":
            # This host's adapter on a kernel that no longer lists the address: ask the kernel.
            index = path.rsplit("/", 1)[-1].removeprefix("hci")
            address = hci_address(int(index)) if index.isdigit() else None
            if address is not None:
                attrs["address"] = address.encode()
        node = self.node(path, node_type, subsystem, props, attrs) if node_type else None
        slaves = tuple(self.listdir(path + "/slaves")) if virtual_block else ()
        return SysDevice(path, subsystem, driver, props, attrs, node, slaves)

    def forget_vanished(self) -> None:
        """Drop what earlier walks read of paths this walk did not find."""
        self.memo.keep_only(self.root, self.devices)

    def node(self, path: str, node_type: str, subsystem: str | None, props: dict[str, str],
             attrs: dict[str, bytes]) -> DevNode | None:
        major, minor = props.get("MAJOR"), props.get("MINOR")
        if major is None or minor is None:
            dev = self.read(path + "/dev")
            if dev is None:
                return None
            major, _, minor = dev.decode(errors="replace").strip().partition(":")
        name = props.get("DEVNAME")
        busnum, devnum = attrs.get("busnum"), attrs.get("devnum")
        numbers = dev_numbers(major, minor)
        if numbers is None:
            self.problem(f"{path}: bad device number {major!r}:{minor!r}")
            return None
        if not name:
            name = default_devname(subsystem, path.rsplit("/", 1)[-1], props,
                                   busnum.decode(errors="replace") if busnum else None,
                                   devnum.decode(errors="replace") if devnum else None,
                                   numbers[0])
        if not name:
            return None
        name = name.removeprefix("/dev/")
        problem = devname_problem(name)
        if problem is not None:
            self.problem(f"{path}: device name {name[:60]!r} refused: {problem}")
            return None
        kind = "b" if node_type == "b" else "c"
        return DevNode(name, kind, *numbers)  # type: ignore[arg-type]

    def console(self) -> tuple[str, ...]:
        raw = self.read("/class/tty/console/active")
        if raw is None:
            return ()
        names = [x.decode(errors="replace") for x in raw.split()]
        out: list[str] = []
        for name in names:
            out.append(name)
            if name == "tty0":
                # tty0 is "the current virtual terminal": follow it to the real one.
                active = self.read("/class/tty/tty0/active")
                if active:
                    out.extend(x.decode(errors="replace") for x in active.split())
        return tuple(out)


def read_sysfs(root: Path | str = "/sys", memo: ReaderMemo | None = None) -> Snapshot:
    """One walk of the sysfs tree under ``root``; :class:`InputError` if it is not one.

    ``memo`` holds what earlier walks read (:class:`ReaderMemo`); without one, all is read."""
    if not os.path.isdir(os.path.join(root, "dev", "char")):
        raise InputError(f"{root} is not a sysfs tree: it has no dev/char index")
    walk = _Walk(Path(root), memo if memo is not None else ReaderMemo())
    index = {bus: set(walk.listdir(f"/bus/{bus}/devices")) for bus in BUSES}
    # Device nodes first, so a usb_device is loaded with its node (usbfs) and its attributes. A
    # virtual character device (tty1, null, loop-control) has no parent hardware and is never
    # owned; virtual block devices are kept for the storage roles built on others (dm, md).
    for kind, node_type in (("char", "c"), ("block", "b")):
        entries = f"/dev/{kind}"
        for entry in walk.listdir(entries):
            path = walk.resolve(entries, entry)
            if path is None:
                continue
            if node_type == "c" and path.startswith("/devices/virtual/"):
                # One kind is kept: a legacy event node (13:64..13:95) of a virtual input device
                # (uinput's, uhid's), with its input device, whose phys names the Bluetooth
                # adapter it belongs to (rules: bluetooth.virtual-nodes).
                if entry not in _LEGACY_EVENT_NUMBERS:
                    continue
                walk.load(path.rsplit("/", 1)[0])
            walk.load(path, node_type, numbers=entry)
    for bus in ("pci", "usb"):
        for entry in sorted(index[bus]):
            path = walk.resolve(f"/bus/{bus}/devices", entry)
            if path is not None:
                walk.load(path, subsystem=bus)
    for entry in walk.listdir("/class/bluetooth"):
        path = walk.resolve("/class/bluetooth", entry)
        if path is not None:
            walk.load(path)
    # Network interfaces own no node, but mark their card (rules: hardware.network-cards);
    # the virtual ones (a pod's veth, bridges) belong to no hardware.
    for entry in walk.listdir("/class/net"):
        path = walk.resolve("/class/net", entry)
        if path is not None and not path.startswith("/devices/virtual/"):
            walk.load(path, subsystem="net")
    # Board devices matter as owners of nodes (rules: hardware.node-owner): only
    # the ancestors of a node are looked up in the platform, ACPI and PNP indexes.
    wanted: set[tuple[str, str]] = set()
    for dev in list(walk.devices.values()):
        if dev.node is None:
            continue
        for anc in dev.ancestors():
            owner = walk.devices.get(anc)
            if owner is not None and owner.subsystem in ("pci", "usb"):
                break  # a PCI or USB device owns what is below it
            name = anc.rsplit("/", 1)[-1]
            for bus in BOARD_BUSES:
                if name in index[bus]:
                    wanted.add((bus, name))
    for bus, name in sorted(wanted):
        path = walk.resolve(f"/bus/{bus}/devices", name)
        if path is not None:
            walk.load(path, subsystem=bus)
    walk.forget_vanished()
    return Snapshot(walk.devices, walk.console(), tuple(walk.problems))
