"""The considered hardware and which of it owns each device node.

rules: hardware.considered, hardware.node-owner. Every PCI function and USB interface, a USB device
(considered whole only when no interface has a driver), and the board devices (platform, ACPI,
PNP) outside every PCI or USB device, the outermost bound one owning its subtree. Each device
node belongs to the deepest PCI function or USB interface above it, else to that board device.
Only bus devices are USB devices: a class device of an older kernel's ``usb`` class is a node of
its interface (rules: usb.bus-devices-only).
"""

from __future__ import annotations

from typing import Literal

from ..sysfs.model import Snapshot, SysDevice
from ..sysfs.reader import BOARD_BUSES
from ..sysfs.usbbus import usb_role

# The firmware's description of a PCI host bridge (ACPI PNP0A03/PNP0A08, driver pci_root) is the
# same bus structure as a PCI host bridge: it never owns the nodes of the devices below it.
BOARD_STRUCTURE_IDS = ("PNP0A03", "PNP0A08")

HardwareKind = Literal["pci", "usb-interface", "usb-device", "board"]


class Hardware:
    """One considered piece of hardware and the nodes of its subtree (filled in as the tree is
    built: one object per piece, compared by identity)."""

    __slots__ = ("bus", "dev", "hci", "kind", "net", "nodes")

    def __init__(self, dev: SysDevice, bus: str, kind: HardwareKind) -> None:
        self.dev = dev
        self.bus = bus
        self.kind = kind
        self.nodes: list[SysDevice] = []
        self.hci = False  # a Bluetooth controller sits in its subtree
        self.net = False  # a network interface (class ``net``) sits in its subtree

    def __repr__(self) -> str:
        return f"Hardware({self.kind} {self.path})"

    @property
    def path(self) -> str:
        return self.dev.path

    @property
    def address(self) -> str:
        return self.dev.name


class HardwareTree:
    """The considered hardware of one snapshot, with its nodes assigned."""

    def __init__(self, snap: Snapshot) -> None:
        self.devs = snap.devices
        self.hardware: dict[str, Hardware] = {}
        self._interfaces: dict[str, list[Hardware]] | None = None
        self._classify()
        self._assign_nodes()

    def _classify(self) -> None:
        for dev in self.devs.values():
            sub = dev.subsystem
            if sub == "pci":
                self.hardware[dev.path] = Hardware(dev, "pci", "pci")
            elif sub == "usb":
                # Only bus devices are USB devices: a class device of the legacy usb class
                # (hiddev0, cdc-wdm1) is a node of its interface (rules: usb.bus-devices-only).
                role = usb_role(dev.name, dev.devtype)
                if role == "usb_interface":
                    self.hardware[dev.path] = Hardware(dev, "usb", "usb-interface")
                elif role == "usb_device":
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

    def _assign_nodes(self) -> None:
        for dev in self.devs.values():
            if dev.subsystem in ("bluetooth", "net"):
                hw = self.owner(dev)
                if hw is not None:
                    hw.hci = hw.hci or dev.subsystem == "bluetooth"
                    hw.net = hw.net or dev.subsystem == "net"
            if dev.node is None or dev.subsystem == "usb_endpoint" or placeholder_port(dev) \
                    or (dev.subsystem == "usb" and usb_role(dev.name, dev.devtype) is not None):
                # usbfs nodes belong to the USB device and are added per interface; usb_endpoint
                # nodes existed only on 2.6-era kernels and never reach /dev today.
                continue
            hw = self.owner(dev)
            if hw is not None:
                hw.nodes.append(dev)

    def interfaces(self, usb_path: str) -> list[Hardware]:
        """The interfaces of the USB device at ``usb_path``, in interface order."""
        if self._interfaces is None:
            by_parent: dict[str, list[Hardware]] = {}
            for hw in self.hardware.values():
                if hw.kind == "usb-interface":
                    by_parent.setdefault(hw.dev.parent_path, []).append(hw)
            for ifaces in by_parent.values():
                ifaces.sort(key=lambda h: _interface_order(h.dev))
            self._interfaces = by_parent
        return self._interfaces.get(usb_path, [])

    def first_interface(self, usb: SysDevice) -> SysDevice | None:
        ifaces = self.interfaces(usb.path)
        return ifaces[0].dev if ifaces else None


def placeholder_port(dev: SysDevice) -> bool:
    """rules: hardware.placeholder-serial. A ``ttyS*`` whose tty ``type`` is 0 has no UART
    behind it (the 8250 driver registers spare ports) and is no device's node. A port with no
    ``type`` file is taken as real."""
    if dev.subsystem != "tty" or not dev.name.startswith("ttyS"):
        return False
    kind = dev.attrs.get("type")
    return kind is not None and kind.strip() == b"0"


def _interface_order(dev: SysDevice) -> tuple[int, str]:
    # "1-2:1.10" sorts after "1-2:1.2": order by configuration then interface number.
    tail = dev.name.rsplit(":", 1)[-1]
    conf, _, num = tail.partition(".")
    try:
        return int(conf) * 1000 + int(num), dev.name
    except ValueError:
        return 1 << 30, dev.name
