"""The policy: from a snapshot of sysfs to the devices a node publishes (docs/rules/).

``build_inventory(snapshot, context)`` finds the considered hardware (:mod:`.hardware`), decides
each piece by the rules of its topic (PCI functions and board devices here, USB devices in
:mod:`.usb`, the nodes of one piece in :mod:`.publish`, with :mod:`.reserved` and
:mod:`.sharing`), names the devices (:mod:`.names`) and applies the cap (rules: limits.cap): at most
128 devices, the rest dropped and counted. The claims prepared on this node (``claimed``) keep a
claimed USB device's shape and are kept first under the cap (:mod:`.claims`).
"""

from __future__ import annotations

from ..sysfs.model import Snapshot
from .attributes import AttributeMemo, AttributeReader, pci_class
from .claims import cap
from .context import Context
from .hardware import Hardware, HardwareTree
from .ledger import Ledger
from .limits import MAX_DEVICES
from .model import NO_CLAIMS, Claimed, Inventory, Outcome, PublishedDevice, Reason
from .names import Names
from .network import is_usb_host_controller
from .publish import NodePublisher
from .usb import UsbRules, serial_lines

__all__ = ["MAX_DEVICES", "build_inventory"]

# Every PCI bridge is bus structure (rules: hardware.bus-structure): host, ISA/LPC,
# PCI-to-PCI, CardBus and other bridges, the base class 0x06.
PCI_BRIDGE_BASE_CLASS = 0x06


def build_inventory(snapshot: Snapshot, context: Context | None = None, *,
                    memo: AttributeMemo | None = None,
                    claimed: Claimed = NO_CLAIMS) -> Inventory:
    """The devices a node publishes for this snapshot, and why the rest is not published.

    ``memo`` carries what earlier walks computed (a :class:`~.sources.Sources` holds one); the
    answer is the same without it. ``claimed``: the devices the claims prepared on this node
    hold (the agent and the plugin know them; offline commands pass none).
    """
    ctx = context or Context()
    tree = HardwareTree(snapshot)
    ledger = Ledger(AttributeReader(tree, ctx.catalogs, memo), ctx.catalogs)
    names = Names()
    publisher = NodePublisher(ledger, snapshot, ctx.facts)
    usb = UsbRules(tree, publisher, serial_lines(tree, ctx.machine.serio), ctx.machine.modules,
                   claimed, names)
    for hw in sorted(tree.hardware.values(), key=lambda h: h.path):
        if hw.kind == "pci":
            _decide_pci(hw, publisher)
        elif hw.kind == "usb-device":
            usb.decide(hw)
        elif hw.kind == "board":
            _decide_board(hw, publisher)
    return _finish(ledger, names, ctx, claimed)


def _decide_pci(hw: Hardware, publisher: NodePublisher) -> None:
    # Structure is never published, and a driverless bridge is not unclaimed hardware either.
    code = pci_class(hw.dev)
    if code is not None and code >> 16 == PCI_BRIDGE_BASE_CLASS:
        publisher.ledger.outcome(hw, Reason.BUS_STRUCTURE,
                                 "a PCI bridge: structure that peripherals attach to")
    elif is_usb_host_controller(hw):
        publisher.ledger.outcome(hw, Reason.BUS_STRUCTURE,
                                 "a USB host controller: the USB core's own device, whose "
                                 "usbmon node reads every packet on the bus")
    else:
        publisher.if_driven(hw)


def _decide_board(hw: Hardware, publisher: NodePublisher) -> None:
    # A board device is considered when it owns a device node (rules: hardware.considered);
    # the hundreds of firmware-described devices without one are not.
    if hw.nodes:
        publisher.if_driven(hw)


def _finish(ledger: Ledger, names: Names, ctx: Context, claimed: Claimed) -> Inventory:
    """The candidates named, then the cap (rules: limits.cap, limits.cap-keeps-claimed)."""
    made = names.make(ledger.candidates)
    published = [PublishedDevice(name, c.attributes, c.nodes, c.shareable, c.hw.path, c.kind,
                                 c.left_out)
                 for c, name in zip(ledger.candidates, made, strict=True)]
    published.sort(key=lambda d: d.name)
    kept, overflow = cap(published, claimed)
    outcomes = ledger.named_outcomes(made)
    if overflow:
        outcomes = _dropped(outcomes, {d.name for d in overflow})
    return Inventory(tuple(kept), tuple(outcomes), tuple(ledger.unclaimed),
                     tuple(d.name for d in overflow), ctx.facts, dict(ledger.held),
                     ledger.catalog_error)


def _dropped(outcomes: list[Outcome], dropped: set[str]) -> list[Outcome]:
    """The outcomes with the devices past the cap said so."""
    out: list[Outcome] = []
    for o in outcomes:
        names = o.devices
        if names and all(n in dropped for n in names):
            out.append(Outcome(o.path, o.bus, o.address, o.driver, (), Reason.OVER_CAP,
                               f"would be {', '.join(names)}"))
        elif any(n in dropped for n in names):
            lost = [n for n in names if n in dropped]
            kept = [i for i, n in enumerate(names) if n not in dropped]
            out.append(Outcome(o.path, o.bus, o.address, o.driver,
                               tuple(names[i] for i in kept), o.reason,
                               f"{Reason.OVER_CAP}: {', '.join(lost)}",
                               tuple(o.parts[i] for i in kept) if o.parts else ()))
        else:
            out.append(o)
    return out
