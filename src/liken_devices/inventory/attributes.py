"""Attributes (rules: attributes.domain, attributes.set, attributes.name-from-catalogs).

What a selector reads about a device: its bus and address, the driver, the PCI or USB class as a
word and as a code, the IDs, the serial, a name from the ID catalogs or the descriptor strings,
and the modalias; on a PCI function also where it sits: the PCIe root and the NUMA node
(rules: attributes.topology, attributes.usb-no-topology). An attribute the hardware lacks is
absent, never empty; a string value is printable UTF-8 cut to 64 bytes, so a strange serial never
breaks the slice.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..sysfs.model import SysDevice
from .catalogs import Catalogs
from .hardware import Hardware, HardwareTree
from .limits import VALUE_MAX
from .model import AttrValue

PCI_CLASSES = {
    0x00: "unclassified", 0x01: "storage", 0x02: "network", 0x03: "display", 0x04: "multimedia",
    0x05: "memory", 0x06: "bridge", 0x07: "communication", 0x08: "system", 0x09: "input",
    0x0A: "docking", 0x0B: "processor", 0x0C: "serial-bus", 0x0D: "wireless",
    0x0E: "intelligent-io", 0x0F: "satellite", 0x10: "encryption", 0x11: "signal-processing",
    0x12: "accelerator", 0x13: "instrumentation", 0x40: "coprocessor", 0xFF: "unassigned",
}
STANDARD = "resource.kubernetes.io"
# The most NUMA nodes Linux has (MAX_NUMNODES: NODES_SHIFT is at most 10).
NUMA_NODES_MAX = 1 << 10

USB_CLASSES = {
    0x01: "audio", 0x02: "communications", 0x03: "hid", 0x05: "physical", 0x06: "image",
    0x07: "printer", 0x08: "mass-storage", 0x09: "hub", 0x0A: "cdc-data", 0x0B: "smart-card",
    0x0D: "content-security", 0x0E: "video", 0x0F: "personal-healthcare", 0x10: "audio-video",
    0x11: "billboard", 0x12: "usb-c-bridge", 0xDC: "diagnostic", 0xE0: "wireless",
    0xEF: "miscellaneous", 0xFE: "application-specific", 0xFF: "vendor-specific",
}


def clean_string(raw: bytes | str | None) -> str | None:
    """A string attribute value: printable UTF-8, at most 64 bytes, never empty.

    rules: attributes.bounded. Bytes that are not printable UTF-8 are replaced, so a strange serial
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
    """The 24-bit PCI class code (base class, subclass, programming interface)."""
    for raw in (dev.props.get("PCI_CLASS"), dev.attr("class")):
        if raw:
            try:
                return int(raw, 16)
            except ValueError:
                continue
    return None


def pcie_root(path: str) -> str | None:
    """The PCIe root complex of the function at sysfs ``path``: the first component under
    ``/devices/`` (``pci0000:3a``, the root's ``pci<domain>:<bus>`` directory), as the standard
    attribute's definition and the peers' Go helper (``deviceattribute``) derive it. A path
    that starts elsewhere (a host bridge that is a platform device) has none, as there.

    rules: attributes.topology
    """
    first = path.split("/", 3)[2] if path.startswith("/devices/") else ""
    return first if first.startswith("pci") else None


def numa_node(dev: SysDevice) -> int | None:
    """The function's ``numa_node``: a node number, or None for the kernel's ``-1`` (no NUMA
    information), a missing file or anything that is not a node Linux can have.

    rules: attributes.topology
    """
    raw = dev.attr("numa_node")
    if raw is None or not raw.isascii() or not raw.isdigit() or (raw != "0" and raw[0] == "0"):
        return None
    n = int(raw) if len(raw) <= 4 else NUMA_NODES_MAX
    return n if n < NUMA_NODES_MAX else None


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


class AttributeMemo:
    """The attributes computed by the last walks, by hardware path, with the objects they came from.

    Attributes depend only on the hardware's own device, its USB device and first interface, and
    the catalogs. The sysfs reader hands back the same device objects while a device is
    unchanged, so the answer of the last walk is reused when all of them are the same objects.
    One memo belongs to one :class:`~.sources.Sources` (a fresh walk without one computes all).
    """

    MAX = 20000

    def __init__(self) -> None:
        self._known: dict[str, tuple[tuple[object, ...], dict[str, AttrValue]]] = {}

    def get(self, path: str, inputs: tuple[object, ...]) -> dict[str, AttrValue] | None:
        known = self._known.get(path)
        if known is None or len(known[0]) != len(inputs):
            return None
        if all(a is b for a, b in zip(known[0], inputs, strict=True)):
            return dict(known[1])
        return None

    def put(self, path: str, inputs: tuple[object, ...], attrs: dict[str, AttrValue]) -> None:
        if len(self._known) > self.MAX:
            self._known.clear()
        self._known[path] = (inputs, attrs)


class AttributeReader:
    """The attributes of the hardware of one walk."""

    def __init__(self, tree: HardwareTree, catalogs: Catalogs,
                 memo: AttributeMemo | None = None) -> None:
        self.tree = tree
        self.devs: Mapping[str, SysDevice] = tree.devs
        self.catalogs = catalogs
        self.memo = memo

    def __call__(self, hw: Hardware) -> dict[str, AttrValue]:
        """The hardware's attributes; a fresh dict the caller may extend."""
        usb = self.devs.get(hw.dev.parent_path) if hw.kind == "usb-interface" else None
        first = self.tree.first_interface(hw.dev) if hw.kind == "usb-device" else None
        inputs = (hw.dev, usb, first, self.catalogs)
        if self.memo is not None:
            known = self.memo.get(hw.path, inputs)
            if known is not None:
                return known
        attrs = self._compute(hw)
        if self.memo is not None:
            self.memo.put(hw.path, inputs, attrs)
        return dict(attrs)

    def _compute(self, hw: Hardware) -> dict[str, AttrValue]:
        attrs: dict[str, AttrValue] = {"bus": hw.bus, "address": hw.address}
        if hw.kind != "usb-device" and hw.dev.driver:
            attrs["driver"] = hw.dev.driver
        if hw.kind == "pci":
            modalias = self._pci(hw, attrs)
        elif hw.bus == "usb":
            modalias = self._usb(hw, attrs)
        else:
            modalias = hw.dev.props.get("MODALIAS") or hw.dev.attr("modalias")
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

    def _pci(self, hw: Hardware, attrs: dict[str, AttrValue]) -> str | None:
        dev = hw.dev
        vendor, product = pci_ids(dev)
        code = pci_class(dev)
        if code is not None:
            attrs["class"] = PCI_CLASSES.get(code >> 16, "other")
            attrs["classCode"] = f"{code:06x}"
        if vendor and product:
            attrs["vendor"], attrs["product"] = vendor, product
            attrs["name"] = self.catalogs.pci.name(vendor, product) or f"{vendor}:{product}"
        # Every device of a PCI function pairs across drivers (rules: attributes.address-pairs),
        # and by where it sits: its root complex and NUMA node (rules: attributes.topology).
        attrs[f"{STANDARD}/pciBusID"] = hw.address.lower()
        root = pcie_root(dev.path)
        if root is not None:
            attrs[f"{STANDARD}/pcieRoot"] = root
        node = numa_node(dev)
        if node is not None:
            attrs[f"{STANDARD}/numaNode"] = node
        return dev.props.get("MODALIAS") or dev.attr("modalias")

    def _usb(self, hw: Hardware, attrs: dict[str, AttrValue]) -> str | None:
        dev = hw.dev
        usb = self.devs.get(dev.parent_path) if hw.kind == "usb-interface" else dev
        iface = dev if hw.kind == "usb-interface" else self.tree.first_interface(dev)
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
            name = self._usb_name(usb, vendor, product)
            if name:
                attrs["name"] = name
        return modalias

    def _usb_name(self, usb: SysDevice, vendor: str | None, product: str | None) -> str | None:
        if vendor and product:
            known = self.catalogs.usb.name(vendor, product)
            if known:
                return clean_string(known)
        words = " ".join(w for w in (clean_string(usb.attrs.get("manufacturer")),
                                     clean_string(usb.attrs.get("product"))) if w)
        if words:
            return clean_string(words)
        return f"{vendor}:{product}" if vendor and product else None
