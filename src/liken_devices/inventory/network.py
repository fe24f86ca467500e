"""Network cards and USB host controllers: hardware whose nodes serve the host, not a pod.

rules: hardware.network-cards. A network card has nothing to give a pod, so it never appears, on
any bus: a PCI function, a USB interface or a board's network port. A card carries some nodes for
the host's own network: its PTP hardware clocks (the machine's time
may be disciplined by them) and its RDMA nodes (verbs on the host's link bypass the network's
policy). In a card's subtree those are never delivered, so a card has nothing left. Other nodes
beside a network interface, such as a modem's control port (``cdc-wdm``, ``wwan``), are delivered as
usual.

USB host controllers are the USB core's own devices (rules: hardware.bus-structure), and their
``usbmon`` nodes read every packet on the bus: keystrokes, security keys, disks. No device delivers
a ``usbmon`` node.
"""

from __future__ import annotations

import re

from ..sysfs.model import SysDevice
from .attributes import pci_class
from .hardware import Hardware

PCI_NETWORK_BASE_CLASS = 0x02
PCI_INFINIBAND_CLASS = 0x0C06
PCI_USB_CONTROLLER_CLASS = 0x0C03  # any programming interface: UHCI, OHCI, EHCI, xHCI, ...
HOST_NETWORK_CLASSES = frozenset({"ptp", "infiniband_verbs", "infiniband_mad", "infiniband_cm"})
# The RDMA management nodes by name, whatever class a kernel files them under.
_RDMA_NAME = re.compile(r"(issm|umad|uverbs)[0-9]+")
NEVER_DELIVERED_CLASSES = frozenset({"usbmon"})
# The devicetree's generic node name for an Ethernet controller (the Devicetree Specification's
# "Generic Names Recommendation"): a board port's platform device is named ``<unit>.ethernet``.
BOARD_NETWORK_NAMES = frozenset({"ethernet"})


def is_network_card(hw: Hardware) -> bool:
    """A PCI function of base class network or of class InfiniBand, or any PCI function, USB
    interface or board device whose subtree holds a network interface (a netdev moved into a
    pod's namespace vanishes from the host's sysfs, so the class code is what stays), or a board
    device the devicetree names an Ethernet controller (its node's generic name, OF_NAME, is
    what stays of a board port). rules: hardware.network-cards"""
    if hw.kind == "usb-device":
        return False
    if hw.net:
        return True
    if hw.kind == "board":
        return hw.dev.props.get("OF_NAME") in BOARD_NETWORK_NAMES
    if hw.kind != "pci":
        return False
    code = pci_class(hw.dev)
    return code is not None and (code >> 16 == PCI_NETWORK_BASE_CLASS
                                 or code >> 8 == PCI_INFINIBAND_CLASS)


def is_usb_host_controller(hw: Hardware) -> bool:
    if hw.kind != "pci":
        return False
    code = pci_class(hw.dev)
    return code is not None and code >> 8 == PCI_USB_CONTROLLER_CLASS


def host_network_node(dev: SysDevice) -> bool:
    """A PTP clock or an RDMA node: the host's network's, when a network card holds it."""
    if dev.subsystem in HOST_NETWORK_CLASSES:
        return True
    return dev.node is not None and _RDMA_NAME.fullmatch(dev.node.name.rsplit("/", 1)[-1]) \
        is not None
