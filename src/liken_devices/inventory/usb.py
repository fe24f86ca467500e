"""USB devices (docs/rules/usb.md, bluetooth.md and serial.md).

A USB device's driven interfaces publish as their own devices, each with the device's usbfs node
(rules: usb.usbfs-per-interface); a device with no driver on any interface publishes whole for
libusb; an interface a program holds through usbfs leaves the slice; a Bluetooth radio publishes one
device with a fixed set of nodes; the serial line a ``spec.serio`` entry names publishes ``-cec``
and ``-input`` and never its tty or the usbfs node. Hubs and root hubs are bus structure. A device a
claim prepared on this node holds keeps its shape until the claim ends (:mod:`.claims`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ..sysfs.model import DevNode, SysDevice
from .attributes import clean_string, usb_device_class, usb_ids, usb_interface_class
from .bluetooth import Adapters, adapter_addresses, bluetooth_nodes, legacy_event_devices
from .claims import claimed_interfaces, holds_whole
from .hardware import Hardware, HardwareTree
from .model import NO_CLAIMS, Claimed, Reason, SerioEntry
from .names import Names
from .publish import NodePublisher
from .reserved import backing

USB_HUB_CLASS = "09"


def serio_entry_matches(entry: SerioEntry, usb: SysDevice) -> bool:
    """Whether a ``spec.serio`` entry names the USB device ``usb``: the one rule for both the
    policy (which withholds the tty) and the machine side (which attaches the line).

    rules: serial.one-matching-rule. Vendor and product are equal and, when the entry
    has a serial, it equals the device's full serial or the published (cut) ``serial``
    attribute, so an operator may copy either into the entry.
    """
    if usb_ids(usb) != (entry.vendor, entry.product):
        return False
    if entry.serial is None:
        return True
    raw = usb.attrs.get("serial")
    if raw is None:
        return False
    full = raw.decode("utf-8", errors="replace").strip()
    return entry.serial in (full, clean_string(raw))


class SerialLines(NamedTuple):
    """The USB devices that a ``spec.serio`` entry names, and the ttyACM nodes they hold, which
    are never published (rules: serial.tty-withheld)."""

    adapters: frozenset[str]  # sysfs paths of the USB devices
    ttys: frozenset[str]  # node names ("ttyACM0")


def serial_lines(tree: HardwareTree, entries: Iterable[SerioEntry]) -> SerialLines:
    entries = tuple(entries)
    if not entries:
        return SerialLines(frozenset(), frozenset())
    adapters = {hw.path for hw in tree.hardware.values()
                if hw.kind == "usb-device" and any(serio_entry_matches(e, hw.dev) for e in entries)}
    ttys = {n.node.name for hw in tree.hardware.values()
            if hw.kind == "usb-interface" and hw.dev.parent_path in adapters
            for n in hw.nodes
            if n.node and n.subsystem == "tty" and n.node.name.startswith("ttyACM")}
    return SerialLines(frozenset(adapters), frozenset(ttys))


class UsbRules:
    """Decides each USB device of one walk and its interfaces."""

    def __init__(self, tree: HardwareTree, publisher: NodePublisher, serial: SerialLines,
                 modules: Iterable[str], claimed: Claimed = NO_CLAIMS,
                 names: Names | None = None) -> None:
        self.tree = tree
        self.claimed = claimed
        self.names = names or Names()
        self.publisher = publisher
        self.ledger = publisher.ledger
        self.serial = serial
        self.uhid = "uhid" in modules
        self._events: list[SysDevice] | None = None
        self._adapters: tuple[dict[str, str], Adapters] | None = None

    def decide(self, hw: Hardware) -> None:
        ifaces = self.tree.interfaces(hw.path)
        if self._bus_structure(hw, ifaces):
            return
        # No usbfs for a USB device the machine depends on
        # (rules: usb.machine-depends, serial.no-usbfs): usbfs has no interface boundary, so through
        # a sibling's claim a pod could detach usb-storage from the system disk or reset the device
        # under the console.
        depends = self.machine_depends(hw, ifaces)
        usbfs = None if depends else hw.dev.node
        if self._held_whole(hw, ifaces, usbfs):
            return
        kept = claimed_interfaces(ifaces, self.claimed, self.names)
        if not kept and not any(i.dev.driver for i in ifaces):
            self._whole(hw, ifaces, depends)
            return
        radio = next((i for i in ifaces if i.dev.driver == "btusb" and i.hci), None)
        for i in ifaces:
            if radio is not None and i is not radio and i.dev.driver == "btusb":
                self.ledger.outcome(i, Reason.FOLDED, f"another btusb interface of {radio.address}")
            elif i is radio:
                # The adapter: its USB device and every btusb interface of it, one device
                # (rules: bluetooth.one-device).
                self._bluetooth(i, usbfs, {hw.path, *(x.path for x in ifaces
                                                      if x.dev.driver == "btusb")})
            elif i.path in kept and not i.dev.driver:
                self._held_interface(i, usbfs, kept[i.path])
            else:
                self._interface(i, usbfs)
        held = [i.address for i in ifaces if i.dev.driver == "usbfs"]
        if held and not kept and all(i.dev.driver in (None, "usbfs") for i in ifaces):
            # The whole device a libusb program holds (rules: usb.held-by-program): out of
            # the slice until the program lets go, then published whole again.
            self.ledger.outcome(hw, Reason.HELD_BY_PROGRAM,
                                f"{', '.join(held)} held; published whole again when the "
                                "program lets go")

    def _bus_structure(self, hw: Hardware, ifaces: list[Hardware]) -> bool:
        """Hubs and root hubs are what peripherals attach to (rules: hardware.bus-structure)."""
        is_root = hw.dev.name.startswith("usb")
        if not (is_root or usb_device_class(hw.dev) == USB_HUB_CLASS or any(
                usb_interface_class(i.dev) == int(USB_HUB_CLASS, 16) for i in ifaces)):
            return False
        what = "a USB root hub" if is_root else "a USB hub"
        self.ledger.outcome(hw, Reason.BUS_STRUCTURE,
                            f"{what}: structure that peripherals attach to")
        for i in ifaces:
            self.ledger.outcome(i, Reason.BUS_STRUCTURE, f"interface of {what}")
        return True

    def machine_depends(self, hw: Hardware, ifaces: list[Hardware]) -> str | None:
        """Why the machine depends on the USB device ``hw`` (its usbfs node is then delivered
        by no claim), or None: an interface holds a partition backing a storage role (any block
        device while the facts are unreadable) or the console, or a ``spec.serio`` entry names
        it (rules: usb.machine-depends, serial.no-usbfs)."""
        if hw.path in self.serial.adapters:
            return "a spec.serio entry names it"
        roles = self.publisher.roles
        for i in ifaces:
            blocks = [n for n in i.nodes if n.node and n.node.type == "b"]
            if blocks and (roles is None or backing(blocks, roles)):
                return f"{i.address} holds the machine's disk"
            if any(n.node and n.node.name in self.publisher.console for n in i.nodes):
                return f"{i.address} holds the console"
        return None

    def _whole(self, hw: Hardware, ifaces: list[Hardware], depends: str | None) -> None:
        """Published whole, usbfs only, exclusive (rules: usb.whole-device)."""
        name = self.names.of(hw)
        usbfs = hw.dev.node
        if depends:
            # The machine's (a serial-line adapter's usbfs node is never delivered, also before
            # its driver binds); its interfaces wait for their driver.
            self.ledger.outcome(hw, Reason.ONLY_RESERVED, f"{depends}: its usbfs node is never "
                                "delivered")
            for i in ifaces:
                self.ledger.outcome(i, Reason.NO_DRIVER)
                self.ledger.add_unclaimed(i)
            return
        if usbfs is None:
            self.ledger.outcome(hw, Reason.NO_NODE, "no driver on any interface, and no usbfs node")
        else:
            attrs = self.ledger.attributes(hw)
            whole = self.ledger.candidate(hw, "", "usb-whole", (usbfs,), attrs, False)
            self.ledger.outcome(hw, None, "no driver on any interface: published whole for "
                                "libusb" + self._kernel_instead(ifaces), [whole])
        # rules: usb.unclaimed-means-unpublished. A device published whole is neither in the
        # Machine's unclaimed list nor in the report's commented modules.
        for i in ifaces:
            self.ledger.outcome(i, Reason.FOLDED, f"interface of {name}, published whole"
                                + self._kernel_instead([i]))

    def _kernel_instead(self, ifaces: list[Hardware]) -> str:
        """What ``explain`` says of the modules that would drive a whole device in the kernel."""
        modules = sorted({m for i in ifaces for m in self.ledger.kernel_modules(i)[1]})
        if not modules:
            return ""
        return (f"; in the kernel {' or '.join(modules)} would drive it instead (declaring one "
                f"replaces the whole device with its driven interface, and ends libusb use)")

    def _held_whole(self, hw: Hardware, ifaces: list[Hardware], usbfs: DevNode | None) -> bool:
        """A device a claim holds whole stays whole until the claim ends.

        While no interface has a driver it publishes whole as usual (False: not decided here).
        While a program holds an interface (``usbfs``), or anything binds one, it is in use, not
        absent: it is out of the slice, none of its interfaces publishes, and the claim keeps the
        device's current usbfs node (rules: usb.claimed-keeps-shape, usb.held-by-program).
        """
        if not holds_whole(hw, self.claimed, self.names) or not any(i.dev.driver for i in ifaces):
            return False
        name = self.names.of(hw)
        program = any(i.dev.driver == "usbfs" for i in ifaces)
        self.ledger.outcome(hw, Reason.HELD_BY_CLAIM, "a claim holds it whole; " + (
            "a program holds an interface through usbfs" if program else
            "an interface has a driver now, but the device keeps its shape until the claim ends"))
        if usbfs is not None:
            self.ledger.held[name] = (usbfs,)
        for i in ifaces:
            self.ledger.outcome(i, Reason.HELD_BY_CLAIM,
                                f"interface of {name}, which a claim holds whole")
        return True

    def _held_interface(self, hw: Hardware, usbfs: DevNode | None, names: list[str]) -> None:
        """A claimed interface its program left (no driver) keeps its shape: not published, the
        device not whole, the claim keeps the current usbfs node (rules: usb.claimed-keeps-shape).
        """
        self.ledger.outcome(hw, Reason.HELD_BY_CLAIM,
                            "no driver (its program left it); a claim holds it, so it keeps "
                            "its shape until the claim ends")
        if usbfs is not None:
            for name in names:
                self.ledger.held[name] = (usbfs,)

    def _interface(self, hw: Hardware, usbfs: DevNode | None) -> None:
        """One interface of a device with a driver on some interface (``usbfs`` is None when
        the machine depends on the device)."""
        if not hw.dev.driver:
            self.ledger.outcome(hw, Reason.NO_DRIVER)
            self.ledger.add_unclaimed(hw)
        elif hw.dev.driver == "usbfs":
            # A libusb program detached the kernel driver and holds it (rules: usb.held-by-program):
            # it leaves the slice, but its claim keeps the usbfs node (unless the
            # machine depends on the device: then the claim's node is absent).
            self.ledger.outcome(hw, Reason.HELD_BY_PROGRAM, "until the program lets go")
            if usbfs is not None:
                self.ledger.held[self.names.of(hw)] = (usbfs,)
        else:
            self.publisher.nodes(hw, usbfs=usbfs, serio_ttys=self.serial.ttys)

    def _bluetooth_adapters(self) -> tuple[dict[str, str], Adapters]:
        """The node's adapters' addresses (by the path holding each hci) and, for the virtual
        event nodes' rule, which adapter each address names and how many Bluetooth claims are
        prepared on the node."""
        if self._adapters is None:
            addresses = adapter_addresses(self.tree.devs.values())
            named: dict[str, list[str]] = {}
            for holder, a in sorted(addresses.items()):
                named.setdefault(a, []).append(self.names.of_usb(holder))
            holders = {d.path.rpartition("/bluetooth/")[0] for d in self.tree.devs.values()
                       if d.subsystem == "bluetooth" and d.props.get("DEVTYPE") == "host"
                       and "/bluetooth/" in d.path}
            radios = {self.names.of_usb(h) for h in holders}
            claims = len(radios & self.claimed.counted())
            # An adapter whose address is unknown may be a clone of any other: no address is
            # then proved one adapter's alone (rules: bluetooth.virtual-nodes).
            unknown = tuple(sorted(self.names.of_usb(h) for h in holders if h not in addresses))
            self._adapters = (addresses, Adapters(
                {a: tuple(sorted(ns)) for a, ns in named.items()}, claims, unknown))
        return self._adapters

    def _bluetooth(self, hw: Hardware, usbfs: DevNode | None, adapter: set[str]) -> None:
        """rules: bluetooth.deliveries. usbfs, uinput, the legacy event nodes, uhid if declared;
        the event numbers whose nodes other devices hold are left out (``bluetooth``).

        The walk stops at the bluetooth subtree: a connected peripheral's hidraw node under the
        adapter's interface belongs to the peripheral, not to the adapter's claim.
        """
        if self._events is None:
            self._events = legacy_event_devices(self.tree.devs.values())
        addresses, adapters = self._bluetooth_adapters()
        own = {a for holder, a in addresses.items() if holder in adapter}
        nodes, left_out = bluetooth_nodes(usbfs, self.uhid, self._events, self.tree.hardware,
                                          adapter, devs=self.tree.devs, own=own,
                                          adapters=adapters)
        attrs = self.ledger.attributes(hw)
        radio = self.ledger.candidate(hw, "", "bluetooth", nodes, attrs, False, left_out)
        detail = "Bluetooth adapter"
        if left_out:
            detail += ("; event numbers left out, other devices' own: "
                       + "; ".join(x.why() for x in left_out))
        self.ledger.outcome(hw, None, detail, [radio])
