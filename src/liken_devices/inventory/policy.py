"""The policy: from a snapshot of sysfs to the devices a node publishes.

Sections cited are of ``devices.txt`` (the seed) and ``decisions.md``. In short:

* Considered hardware (seed "What a node publishes"; decisions "Which hardware is considered"):
  every PCI function, every USB interface (a USB device whole only when no interface has a
  driver), and board devices (platform, ACPI, PNP) outside any PCI/USB device, the outermost
  bound one owning its subtree. Each device node belongs to the deepest PCI function or USB
  interface above it, else to that board device.
* A device appears when a driver is bound, a claim on it supplies nodes, and the machine does not
  depend on it (storage roles). Reserved nodes (console, rtc0, TPM, a serio-attached tty) are
  dropped from its deliveries; framebuffers are never delivered.
* Sharing: one device per kind of node, GPUs split into render (shared), ``-display``,
  ``-i2c-dev`` and ``-drm-dp-aux-dev``; an unknown mix is published whole and exclusive.
* USB interfaces deliver their device's usbfs node too; Bluetooth adapters deliver a fixed set;
  an attached serial line publishes ``-cec`` and ``-input`` and no usbfs.
* At most 128 devices; the rest is dropped and counted.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from ..sysfs.model import DevNode, Snapshot, SysDevice
from .context import Context
from .model import (
    BUS_STRUCTURE,
    FACTS_UNREADABLE,
    FOLDED,
    HELD_BY_PROGRAM,
    NO_DRIVER,
    NO_NODE,
    ONLY_RESERVED,
    ONLY_WITHHELD,
    OVER_CAP,
    STORAGE_ROLE,
    AttrValue,
    Inventory,
    Outcome,
    PublishedDevice,
    SerioEntry,
    Unclaimed,
)

MAX_DEVICES = 128  # seed "Limits": one slice per node, at most 128 devices
NAME_MAX = 63  # a device name is a DNS label
VALUE_MAX = 64  # bytes in a string attribute (dra-api.md §2.1)
BOARD_BUSES = ("platform", "acpi", "pnp")

# PCI classes that are bus structure (decisions "Which hardware is considered"): host bridges,
# PCI-to-PCI bridges (normal and subtractive decode) and CardBus bridges.
PCI_STRUCTURE_CLASSES = frozenset({0x0600, 0x0604, 0x0607, 0x0609})
USB_HUB_CLASS = "09"
# The firmware's description of a PCI host bridge (ACPI PNP0A03/PNP0A08, driver pci_root) is the
# same bus structure as PCI class 0x0600: it never owns the nodes of the devices below it.
BOARD_STRUCTURE_IDS = ("PNP0A03", "PNP0A08")

# The Bluetooth adapter's fixed deliveries (seed "Bluetooth adapters"): /dev/uinput is misc minor
# 223, /dev/uhid misc minor 239, and the first 32 evdev nodes are char 13:64..13:95.
UINPUT = DevNode("uinput", "c", 10, 223)
UHID = DevNode("uhid", "c", 10, 239)
LEGACY_EVENTS = tuple(DevNode(f"input/event{i}", "c", 13, 64 + i) for i in range(32))

_TPM = re.compile(r"tpm(rm)?[0-9]+")  # fullmatch
_NON_NAME = re.compile(r"[^a-z0-9]+")

PCI_CLASSES = {
    0x00: "unclassified", 0x01: "storage", 0x02: "network", 0x03: "display", 0x04: "multimedia",
    0x05: "memory", 0x06: "bridge", 0x07: "communication", 0x08: "system", 0x09: "input",
    0x0A: "docking", 0x0B: "processor", 0x0C: "serial-bus", 0x0D: "wireless",
    0x0E: "intelligent-io", 0x0F: "satellite", 0x10: "encryption", 0x11: "signal-processing",
    0x12: "accelerator", 0x13: "instrumentation", 0x40: "coprocessor", 0xFF: "unassigned",
}
USB_CLASSES = {
    0x01: "audio", 0x02: "communications", 0x03: "hid", 0x05: "physical", 0x06: "image",
    0x07: "printer", 0x08: "mass-storage", 0x09: "hub", 0x0A: "cdc-data", 0x0B: "smart-card",
    0x0D: "content-security", 0x0E: "video", 0x0F: "personal-healthcare", 0x10: "audio-video",
    0x11: "billboard", 0x12: "usb-c-bridge", 0xDC: "diagnostic", 0xE0: "wireless",
    0xEF: "miscellaneous", 0xFE: "application-specific", 0xFF: "vendor-specific",
}


def clean_string(raw: bytes | str | None) -> str | None:
    """A string attribute value: printable UTF-8, at most 64 bytes, never empty.

    decisions "Attributes": bytes that are not printable UTF-8 are replaced, so a strange serial
    never breaks the slice; the cut falls on a UTF-8 boundary.
    """
    if raw is None:
        return None
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    if text.isascii() and len(text) <= VALUE_MAX and text.isprintable():
        return text.strip() or None  # the common case: short printable ASCII
    text = "".join(ch if ch.isprintable() and ch != "\ufffd" else "?" for ch in text).strip()
    data = text.encode("utf-8", errors="replace")
    if len(data) > VALUE_MAX:
        text = data[:VALUE_MAX].decode("utf-8", errors="ignore").rstrip()
    return text or None


def name_part(address: str) -> str:
    """decisions "Names": lowercase, every run outside [a-z0-9] becomes one ``-``, trimmed."""
    return _NON_NAME.sub("-", address.lower()).strip("-")


@lru_cache(maxsize=8192)
def device_name(bus: str, address: str, suffix: str = "", *, hashed: bool = False) -> str:
    """``<bus>-<address><suffix>`` cut to 63 characters, the base cut first (decisions "Names")."""
    base = f"{bus}-{name_part(address)}"
    room = NAME_MAX - len(suffix)
    base = base[:room].rstrip("-")
    if hashed:
        digest = hashlib.sha256(address.encode()).hexdigest()[:6]
        base = (base[:-7] if len(base) > 7 else "") + "-" + digest
        base = base[:room].lstrip("-")
    return base + suffix


# The attributes computed by the last walks, by hardware path, with the objects they came from.
_ATTRIBUTES: dict[str, tuple[tuple[object, ...], dict[str, AttrValue]]] = {}
_ATTRIBUTES_MAX = 20000


@dataclass
class Hardware:
    """One considered piece of hardware and the nodes of its subtree."""

    dev: SysDevice
    bus: str
    kind: str  # "pci", "usb-interface", "usb-device", "board"
    nodes: list[SysDevice] = field(default_factory=list)
    hci: bool = False  # a Bluetooth controller sits in its subtree

    @property
    def path(self) -> str:
        return self.dev.path

    @property
    def address(self) -> str:
        return self.dev.name


@dataclass(frozen=True)
class _Candidate:
    """A device about to be published, before names are made unique and the cap applies."""

    hw: Hardware
    suffix: str
    kind: str
    nodes: tuple[DevNode, ...]
    attributes: dict[str, AttrValue]
    shareable: bool


class _Policy:
    def __init__(self, snap: Snapshot, ctx: Context) -> None:
        self.snap = snap
        self.ctx = ctx
        self.devs = snap.devices
        self.outcomes: list[Outcome] = []
        self.unclaimed: list[Unclaimed] = []
        self.candidates: list[_Candidate] = []
        self.held: dict[str, tuple[DevNode, ...]] = {}
        self.hardware: dict[str, Hardware] = {}
        self._interfaces: dict[str, list[Hardware]] | None = None
        self.console = set(snap.console)
        self.bluetooth = [d.path for d in snap.devices.values() if d.subsystem == "bluetooth"]

    # -- the considered hardware ---------------------------------------------------------------

    def classify(self) -> None:
        """Find the considered hardware (decisions "Which hardware is considered")."""
        for dev in self.devs.values():
            sub = dev.subsystem
            if sub == "pci":
                self.hardware[dev.path] = Hardware(dev, "pci", "pci")
            elif sub == "usb":
                if dev.devtype == "usb_interface" or (dev.devtype is None and ":" in dev.name):
                    self.hardware[dev.path] = Hardware(dev, "usb", "usb-interface")
                else:
                    self.hardware[dev.path] = Hardware(dev, "usb", "usb-device")
        for dev in self.devs.values():
            if dev.subsystem in BOARD_BUSES and not self._inside_bus_device(dev) \
                    and not dev.name.startswith(BOARD_STRUCTURE_IDS):
                self.hardware[dev.path] = Hardware(dev, dev.subsystem or "", "board")

    def _inside_bus_device(self, dev: SysDevice) -> bool:
        for anc in dev.ancestors():
            hw = self.hardware.get(anc)
            if hw is not None and hw.kind != "board":
                return True
        return False

    def owner(self, dev: SysDevice) -> Hardware | None:
        """The hardware a node (or a Bluetooth controller) belongs to.

        The deepest PCI function or USB interface above it; a node directly under a USB device
        (outside every interface) belongs to none. Otherwise the outermost board device with a
        bound driver owns it, else the nearest board device (which then has no driver).
        """
        board: list[Hardware] = []
        for anc in (dev.path, *dev.ancestors()):
            hw = self.hardware.get(anc)
            if hw is None:
                continue
            if hw.kind in ("pci", "usb-interface"):
                if anc == dev.path:
                    continue
                return hw
            if hw.kind == "usb-device":
                return None
            board.append(hw)
        bound = [hw for hw in board if hw.dev.driver]
        if bound:
            return bound[-1]
        return board[0] if board else None

    def assign_nodes(self) -> None:
        for dev in self.devs.values():
            if dev.subsystem == "bluetooth":
                hw = self.owner(dev)
                if hw is not None:
                    hw.hci = True
            if dev.node is None or dev.subsystem in ("usb", "usb_endpoint"):
                # usbfs nodes belong to the USB device and are added per interface; usb_endpoint
                # nodes existed only on 2.6-era kernels and never reach /dev today.
                continue
            hw = self.owner(dev)
            if hw is not None:
                hw.nodes.append(dev)

    # -- serial lines (seed "Serial-line adapters") ----------------------------------------------

    def serio_matches(self) -> tuple[set[str], set[str]]:
        """USB devices that a ``spec.serio`` entry names, and the ttyACM nodes they hold."""
        adapters: set[str] = set()
        ttys: set[str] = set()
        entries = self.ctx.machine.serio
        if not entries:
            return adapters, ttys
        for hw in self.hardware.values():
            if hw.kind != "usb-device":
                continue
            if any(self._serio_match(hw.dev, e) for e in entries):
                adapters.add(hw.path)
        for hw in self.hardware.values():
            if hw.kind == "usb-interface" and hw.dev.parent_path in adapters:
                for n in hw.nodes:
                    if n.node and n.subsystem == "tty" and n.node.name.startswith("ttyACM"):
                        ttys.add(n.node.name)
        return adapters, ttys

    @staticmethod
    def _serio_match(usb: SysDevice, entry: SerioEntry) -> bool:
        vendor, product = usb_ids(usb)
        if (vendor, product) != (entry.vendor, entry.product):
            return False
        return entry.serial is None or clean_string(usb.attrs.get("serial")) == entry.serial

    # -- attributes (decisions "Attributes") ---------------------------------------------------

    def attributes(self, hw: Hardware) -> dict[str, AttrValue]:
        """The hardware's attributes; a fresh dict the caller may extend.

        They depend only on the hardware's own device, its USB device and first interface, and
        the catalogs. The sysfs reader hands back the same device objects while a device is
        unchanged, so the answer of the last walk is reused when all of them are the same objects.
        """
        usb = self.devs.get(hw.dev.parent_path) if hw.kind == "usb-interface" else None
        first = self.first_interface(hw.dev) if hw.kind == "usb-device" else None
        inputs = (hw.dev, usb, first, self.ctx.catalogs)
        known = _ATTRIBUTES.get(hw.path)
        if known is not None:
            was = known[0]
            if was[0] is inputs[0] and was[1] is inputs[1] and was[2] is inputs[2] \
                    and was[3] is inputs[3]:
                return dict(known[1])
        attrs = self._attributes(hw)
        if len(_ATTRIBUTES) > _ATTRIBUTES_MAX:
            _ATTRIBUTES.clear()
        _ATTRIBUTES[hw.path] = (inputs, attrs)
        return dict(attrs)

    def _attributes(self, hw: Hardware) -> dict[str, AttrValue]:
        attrs: dict[str, AttrValue] = {"bus": hw.bus, "address": hw.address}
        dev = hw.dev
        if hw.kind != "usb-device" and dev.driver:
            attrs["driver"] = dev.driver
        if hw.kind == "pci":
            vendor, product = pci_ids(dev)
            code = pci_class(dev)
            if code is not None:
                attrs["class"] = PCI_CLASSES.get(code >> 16, "other")
                attrs["classCode"] = f"{code:06x}"
            if vendor and product:
                attrs["vendor"], attrs["product"] = vendor, product
                attrs["name"] = (self.ctx.catalogs.pci.name(vendor, product)
                                 or f"{vendor}:{product}")
            attrs["resource.kubernetes.io/pciBusID"] = hw.address.lower()
            modalias = dev.props.get("MODALIAS") or dev.attr("modalias")
        elif hw.bus == "usb":
            usb = self.devs.get(dev.parent_path) if hw.kind == "usb-interface" else dev
            iface = dev if hw.kind == "usb-interface" else self.first_interface(dev)
            if iface is not None:
                code = usb_interface_class(iface)
                if code is not None:
                    attrs["class"] = USB_CLASSES.get(code, "other")
                    attrs["classCode"] = f"{code:02x}"
            modalias = iface.props.get("MODALIAS") or iface.attr("modalias") if iface else None
            if usb is not None:
                vendor, product = usb_ids(usb)
                if vendor and product:
                    attrs["vendor"], attrs["product"] = vendor, product
                serial = clean_string(usb.attrs.get("serial"))
                if serial:
                    attrs["serial"] = serial
                name = self.usb_name(usb, vendor, product)
                if name:
                    attrs["name"] = name
        else:
            modalias = dev.props.get("MODALIAS") or dev.attr("modalias")
        if modalias:
            attrs["modalias"] = modalias
        out: dict[str, AttrValue] = {}
        for key, value in attrs.items():
            if isinstance(value, str):
                cleaned = clean_string(value)
                if cleaned:  # an attribute the hardware lacks is absent, never empty
                    out[key] = cleaned
            else:
                out[key] = value
        return out

    def usb_name(self, usb: SysDevice, vendor: str | None, product: str | None) -> str | None:
        if vendor and product:
            known = self.ctx.catalogs.usb.name(vendor, product)
            if known:
                return clean_string(known)
        words = " ".join(w for w in (clean_string(usb.attrs.get("manufacturer")),
                                     clean_string(usb.attrs.get("product"))) if w)
        if words:
            return clean_string(words)
        return f"{vendor}:{product}" if vendor and product else None

    def first_interface(self, usb: SysDevice) -> SysDevice | None:
        ifaces = self.interfaces(usb.path)
        return ifaces[0].dev if ifaces else None

    def interfaces(self, usb_path: str) -> list[Hardware]:
        if self._interfaces is None:
            by_parent: dict[str, list[Hardware]] = {}
            for hw in self.hardware.values():
                if hw.kind == "usb-interface":
                    by_parent.setdefault(hw.dev.parent_path, []).append(hw)
            for ifaces in by_parent.values():
                ifaces.sort(key=lambda h: _interface_order(h.dev))
            self._interfaces = by_parent
        return self._interfaces.get(usb_path, [])

    # -- outcomes -----------------------------------------------------------------------------

    def outcome(self, hw: Hardware, reason: str | None, detail: str = "",
                devices: Iterable[str] = ()) -> None:
        self.outcomes.append(Outcome(hw.path, hw.bus, hw.address, hw.dev.driver, tuple(devices),
                                     reason, detail))

    def add_unclaimed(self, hw: Hardware, published_as: str | None = None) -> None:
        attrs = self.attributes(hw)
        modalias = attrs.get("modalias")
        modalias = modalias if isinstance(modalias, str) else None
        candidates = self.ctx.catalogs.candidates(modalias)
        label = f"{hw.bus} {hw.address}"
        if published_as:
            if not candidates:
                return  # driven through libusb; nothing for the operator to do
            message = (f"{label} has no kernel driver; it is published whole as {published_as} "
                       f"for programs that use libusb. To drive it in the kernel instead, "
                       f"declare {' or '.join(candidates)} in spec.modules")
        elif candidates:
            message = (f"{label} has no driver bound; declare {' or '.join(candidates)} in "
                       f"spec.modules and it appears in the slice at the next walk")
        elif modalias:
            message = (f"{label} has no driver bound and no module on this machine matches "
                       f"its modalias {modalias}")
        else:
            message = f"{label} has no driver bound and no modalias to match a module against"
        name, cls = attrs.get("name"), attrs.get("class")
        self.unclaimed.append(Unclaimed(hw.path, hw.bus, hw.address, modalias,
                                        name if isinstance(name, str) else None,
                                        cls if isinstance(cls, str) else None,
                                        candidates, message))

    # -- the decision ---------------------------------------------------------------------------

    def run(self) -> Inventory:
        self.classify()
        self.assign_nodes()
        adapters, serio_ttys = self.serio_matches()
        roles = self.role_partitions()
        for hw in sorted(self.hardware.values(), key=lambda h: h.path):
            if hw.kind == "pci":
                self.decide_pci(hw, roles)
            elif hw.kind == "usb-device":
                self.decide_usb_device(hw, adapters, serio_ttys, roles)
            elif hw.kind == "board":
                self.decide_board(hw, roles)
        return self.finish()

    def role_partitions(self) -> frozenset[str] | None:
        """Block device names that back a storage role, following dm/md slaves down."""
        parts = self.ctx.facts.role_partitions
        if parts is None:
            return None
        by_name = {d.node.name.rsplit("/", 1)[-1]: d for d in self.devs.values()
                   if d.node is not None and d.node.type == "b"}
        found: set[str] = set()
        todo = list(parts)
        while todo:
            name = todo.pop()
            if name in found:
                continue
            found.add(name)
            dev = by_name.get(name)
            if dev is not None:
                todo.extend(dev.slaves)
        return frozenset(found)

    def decide_pci(self, hw: Hardware, roles: frozenset[str] | None) -> None:
        code = pci_class(hw.dev)
        if code is not None and code >> 8 in PCI_STRUCTURE_CLASSES:
            self.outcome(hw, BUS_STRUCTURE, "a PCI bridge: structure that peripherals attach to")
            return
        self.publish_if_driven(hw, roles)

    def decide_board(self, hw: Hardware, roles: frozenset[str] | None) -> None:
        # A board device is considered when it owns a device node (seed "What a node
        # publishes"); the hundreds of firmware-described devices without one are not.
        if hw.nodes:
            self.publish_if_driven(hw, roles)

    def publish_if_driven(self, hw: Hardware, roles: frozenset[str] | None) -> None:
        """Condition 1: hardware with no driver supplies nothing; it is unclaimed instead."""
        if not hw.dev.driver:
            self.outcome(hw, NO_DRIVER)
            self.add_unclaimed(hw)
            return
        self.publish_nodes(hw, roles)

    def decide_usb_device(self, hw: Hardware, adapters: set[str], serio_ttys: set[str],
                          roles: frozenset[str] | None) -> None:
        usb = hw.dev
        ifaces = self.interfaces(usb.path)
        dev_class = usb_device_class(usb)
        is_root = usb.name.startswith("usb")
        if is_root or dev_class == USB_HUB_CLASS or any(
                usb_interface_class(i.dev) == int(USB_HUB_CLASS, 16) for i in ifaces):
            what = "a USB root hub" if is_root else "a USB hub"
            self.outcome(hw, BUS_STRUCTURE, f"{what}: structure that peripherals attach to")
            for i in ifaces:
                self.outcome(i, BUS_STRUCTURE, f"interface of {what}")
            return
        usbfs = usb.node
        if not any(i.dev.driver for i in ifaces):
            # seed "USB devices with no kernel driver": published whole, usbfs only, exclusive.
            name = device_name("usb", usb.name)
            if usbfs is None:
                self.outcome(hw, NO_NODE, "no driver on any interface, and no usbfs node")
            else:
                attrs = self.attributes(hw)
                self.candidates.append(_Candidate(hw, "", "usb-whole", (usbfs,), attrs, False))
                self.outcome(hw, None, "no driver on any interface: published whole for libusb",
                             [name])
            for i in ifaces:
                self.outcome(i, FOLDED, f"interface of {name}, published whole")
                self.add_unclaimed(i, published_as=name)
            return
        adapter = usb.path in adapters
        bt_ifaces = [i for i in ifaces if i.dev.driver == "btusb"]
        radio = next((i for i in bt_ifaces if i.hci), None)
        for i in ifaces:
            if radio is not None and i is not radio and i.dev.driver == "btusb":
                self.outcome(i, FOLDED, f"another btusb interface of {radio.address}")
            elif i is radio:
                self.publish_bluetooth(i, usbfs)
            elif not i.dev.driver:
                self.outcome(i, NO_DRIVER)
                self.add_unclaimed(i)
            elif i.dev.driver == "usbfs":
                # A libusb program detached the kernel driver and holds the interface (seed "USB
                # devices"): it leaves the slice, but its claim keeps the usbfs node.
                self.outcome(i, HELD_BY_PROGRAM, "a program holds it through usbfs")
                if usbfs is not None:
                    self.held[device_name("usb", i.address)] = (usbfs,)
            else:
                self.publish_nodes(i, roles, usbfs=None if adapter else usbfs,
                                   serio_ttys=serio_ttys)

    def publish_bluetooth(self, hw: Hardware, usbfs: DevNode | None) -> None:
        """seed "Bluetooth adapters": usbfs, uinput, the 32 legacy event nodes, uhid if declared.

        The walk stops at the bluetooth subtree: a connected peripheral's hidraw node under the
        adapter's interface belongs to the peripheral, not to the adapter's claim.
        """
        nodes: list[DevNode] = [usbfs] if usbfs else []
        nodes.append(UINPUT)
        nodes.extend(LEGACY_EVENTS)
        if "uhid" in self.ctx.machine.modules:
            nodes.append(UHID)
        attrs = self.attributes(hw)
        self.candidates.append(_Candidate(hw, "", "bluetooth", tuple(nodes), attrs, False))
        self.outcome(hw, None, "Bluetooth adapter", [device_name("usb", hw.address)])

    def deliverable(self, hw: Hardware, serio_ttys: set[str]) -> tuple[
            list[SysDevice], list[str], bool]:
        """The nodes a claim may receive, the reserved ones dropped, and whether fb was withheld."""
        keep: list[SysDevice] = []
        reserved: list[str] = []
        withheld = False
        for n in hw.nodes:
            assert n.node is not None
            if any(n.path.startswith(b + "/") for b in self.bluetooth):
                continue  # seed "Bluetooth adapters": the walk stops at a bluetooth subtree
            why = reserved_kind(n.node, self.console, serio_ttys)
            if why:
                reserved.append(f"{n.node.path} ({why})")
                continue
            if n.subsystem == "graphics":
                withheld = True  # seed "Sharing": the legacy framebuffer is never delivered
                continue
            keep.append(n)
        return keep, reserved, withheld

    def publish_nodes(self, hw: Hardware, roles: frozenset[str] | None, *,
                      usbfs: DevNode | None = None, serio_ttys: set[str] | None = None) -> None:
        serio_ttys = serio_ttys or set()
        blocks = [n for n in hw.nodes if n.node and n.node.type == "b"]
        if blocks:
            # seed "What a node publishes", condition 3: a disk belongs to the machine or to a
            # claim, never both; unreadable facts mean no disk at all.
            if roles is None:
                self.outcome(hw, FACTS_UNREADABLE, self.ctx.facts.error or "")
                return
            backing = sorted(n.node.name for n in blocks
                             if n.node and n.node.name.rsplit("/", 1)[-1] in roles)
            if backing:
                self.outcome(hw, STORAGE_ROLE, "backs a storage role: " + ", ".join(backing))
                return
        keep, reserved, withheld = self.deliverable(hw, serio_ttys)
        serial_line = any(n.node and n.node.name in serio_ttys for n in hw.nodes)
        if not keep:
            if serial_line:
                self.outcome(hw, ONLY_RESERVED, "serial line reserved by spec.serio; publishes "
                             "-cec and -input once attached")
            elif reserved:
                self.outcome(hw, ONLY_RESERVED, "; ".join(reserved))
            elif withheld:
                self.outcome(hw, ONLY_WITHHELD, "only a framebuffer, which is never delivered")
            else:
                self.outcome(hw, NO_NODE)
            return
        base = self.attributes(hw)
        names: list[str] = []
        for suffix, kind, nodes, extra, shareable in split(keep, serial_line):
            attrs = dict(base)
            attrs.update(extra)
            # The shared render half delivers its render node only (seed "Sharing"): usbfs has
            # no arbitration contract, so it never reaches a device several claims hold.
            extra_usbfs = (usbfs,) if usbfs is not None and not shareable else ()
            delivered = tuple(nodes) + extra_usbfs
            self.candidates.append(_Candidate(hw, suffix, kind, delivered, attrs, shareable))
            names.append(device_name(hw.bus, hw.address, suffix))
        detail = ("dropped " + "; ".join(reserved)) if reserved else ""
        self.outcome(hw, None, detail, names)

    def finish(self) -> Inventory:
        # Names: unique; a collision after the cut hashes the later one (decisions "Names").
        seen: set[str] = set()
        published: list[PublishedDevice] = []
        renamed: dict[str, str] = {}
        for c in sorted(self.candidates, key=lambda c: (c.hw.path, c.suffix)):
            name = device_name(c.hw.bus, c.hw.address, c.suffix)
            if name in seen:
                old = name
                name = device_name(c.hw.bus, c.hw.address, c.suffix, hashed=True)
                renamed[f"{c.hw.path}\0{old}"] = name
            seen.add(name)
            published.append(PublishedDevice(name, c.attributes, c.nodes, c.shareable,
                                              c.hw.path, c.kind))
        published.sort(key=lambda d: d.name)
        kept, overflow = published[:MAX_DEVICES], published[MAX_DEVICES:]
        if not overflow and not renamed:
            return Inventory(tuple(kept), tuple(self.outcomes), tuple(self.unclaimed), (),
                             self.ctx.facts, dict(self.held))
        dropped = {d.name for d in overflow}
        outcomes: list[Outcome] = []
        for o in self.outcomes:
            names = tuple(renamed.get(f"{o.path}\0{n}", n) for n in o.devices)
            if names and all(n in dropped for n in names):
                outcomes.append(Outcome(o.path, o.bus, o.address, o.driver, (), OVER_CAP,
                                        f"would be {', '.join(names)}"))
            elif any(n in dropped for n in names):
                lost = [n for n in names if n in dropped]
                outcomes.append(Outcome(o.path, o.bus, o.address, o.driver,
                                        tuple(n for n in names if n not in dropped), o.reason,
                                        f"past the 128 cap: {', '.join(lost)}"))
            else:
                outcomes.append(Outcome(o.path, o.bus, o.address, o.driver, names, o.reason,
                                        o.detail))
        return Inventory(tuple(kept), tuple(outcomes), tuple(self.unclaimed),
                         tuple(d.name for d in overflow), self.ctx.facts, dict(self.held))


def split(nodes: list[SysDevice], serial_line: bool) -> list[
        tuple[str, str, list[DevNode], dict[str, AttrValue], bool]]:
    """seed "Sharing": one device per kind of node; a GPU splits; an unknown mix stays whole.

    Returns (suffix, kind, nodes, extra attributes, shareable) for each device to publish.
    """
    kinds: dict[str, list[DevNode]] = {}
    for n in sorted(nodes, key=lambda d: d.node or DevNode("", "c", 0, 0)):
        assert n.node is not None
        kinds.setdefault(node_kind(n), []).append(n.node)
    if serial_line:
        # seed "Serial-line adapters": the CEC bus and the remote, never the bare name.
        return [("-" + kind.replace("_", "-"), kind, ns, {"subsystem": kind}, False)
                for kind, ns in sorted(kinds.items())]
    gpu_kinds = {"render", "card", "i2c-dev", "drm_dp_aux_dev"}
    if {"render", "card", "drm"} & kinds.keys():
        if kinds.keys() <= gpu_kinds:
            out: list[tuple[str, str, list[DevNode], dict[str, AttrValue], bool]] = []
            if "render" in kinds:
                # The driver arbitrates between clients of a render node: the one shared device.
                out.append(("", "render", kinds["render"],
                            {"subsystem": "drm", "renderNode": True}, True))
            if "card" in kinds:
                # DRM master is one per card: the display half is exclusive.
                out.append(("-display", "display", kinds["card"],
                            {"subsystem": "drm", "displayNode": True}, False))
            for kind in ("i2c-dev", "drm_dp_aux_dev"):
                if kind in kinds:
                    out.append(("-" + kind.replace("_", "-"), kind, kinds[kind],
                                {"subsystem": kind}, False))
            return out
        return [("", "mix", [n for ns in kinds.values() for n in ns], {}, False)]
    if len(kinds) == 1:
        kind, ns = next(iter(kinds.items()))
        extra: dict[str, AttrValue] = {"subsystem": kind}
        if kind == "sound":
            extra["sound.liken.sh/supportsSound"] = True
        return [("", kind, ns, extra, False)]
    # An unknown mix: published whole, exclusive, without subsystem.
    return [("", "mix", sorted(n for ns in kinds.values() for n in ns), {}, False)]


def node_kind(dev: SysDevice) -> str:
    """The kind of a node for splitting: its subsystem, with the seed's two refinements."""
    if dev.subsystem == "sound" or "/sound/card" in dev.path:
        return "sound"  # a sound card's jack inputs are part of the card (seed "Sharing")
    if dev.subsystem == "drm" and dev.node is not None:
        base = dev.node.name.rsplit("/", 1)[-1]
        if base.startswith("renderD"):
            return "render"
        if base.startswith(("card", "controlD")):
            # controlD* is the legacy (pre-4.x) control node of the same card: display authority.
            return "card"
        return "drm"
    return dev.subsystem or "unknown"


def reserved_kind(node: DevNode, console: set[str], serio_ttys: set[str]) -> str | None:
    """seed "What a node publishes": the four kinds of node the machine holds."""
    name = node.name
    if name in console:
        return "the console"
    if name == "rtc0":
        return "the system clock"
    if _TPM.fullmatch(name.rsplit("/", 1)[-1]):
        return "the TPM"
    if name in serio_ttys:
        return "a serio-attached serial line"
    return None


def pci_ids(dev: SysDevice) -> tuple[str | None, str | None]:
    pid = dev.props.get("PCI_ID")
    if pid and ":" in pid:
        v, _, p = pid.partition(":")
        return v.lower().zfill(4), p.lower().zfill(4)
    ven, dev_id = dev.attr("vendor"), dev.attr("device")
    if ven and dev_id:
        return ven.lower().removeprefix("0x").zfill(4), dev_id.lower().removeprefix("0x").zfill(4)
    return None, None


def pci_class(dev: SysDevice) -> int | None:
    for raw in (dev.props.get("PCI_CLASS"), dev.attr("class")):
        if raw:
            try:
                return int(raw, 16)
            except ValueError:
                continue
    return None


def usb_ids(dev: SysDevice) -> tuple[str | None, str | None]:
    v, p = dev.attr("idVendor"), dev.attr("idProduct")
    if v and p:
        return v.lower().zfill(4), p.lower().zfill(4)
    prod = dev.props.get("PRODUCT")
    if prod:
        parts = prod.split("/")
        if len(parts) >= 2:
            try:
                return f"{int(parts[0], 16):04x}", f"{int(parts[1], 16):04x}"
            except ValueError:
                pass
    return None, None


def usb_device_class(dev: SysDevice) -> str:
    """bDeviceClass as 2 hex digits, from the attribute or uevent's TYPE (decimal)."""
    raw = dev.attr("bDeviceClass")
    if raw:
        return raw.lower().zfill(2)
    kind = dev.props.get("TYPE", "")
    try:
        return f"{int(kind.split('/')[0]):02x}"
    except ValueError:
        return ""


def usb_interface_class(dev: SysDevice) -> int | None:
    raw = dev.attr("bInterfaceClass")
    if raw:
        try:
            return int(raw, 16)
        except ValueError:
            pass
    iface = dev.props.get("INTERFACE")
    if iface:
        try:
            return int(iface.split("/")[0])
        except ValueError:
            pass
    return None


def _interface_order(dev: SysDevice) -> tuple[int, str]:
    # "1-2:1.10" sorts after "1-2:1.2": order by configuration then interface number.
    tail = dev.name.rsplit(":", 1)[-1]
    conf, _, num = tail.partition(".")
    try:
        return int(conf) * 1000 + int(num), dev.name
    except ValueError:
        return 1 << 30, dev.name


def build_inventory(snapshot: Snapshot, context: Context | None = None) -> Inventory:
    """The devices a node publishes for this snapshot, and why the rest is not published."""
    return _Policy(snapshot, context or Context()).run()
