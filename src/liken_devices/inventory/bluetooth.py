"""What a Bluetooth adapter's claim delivers besides its usbfs node.

rules: bluetooth.deliveries (origin: the "Bluetooth adapters" section of liken's devices page).

The adapter has no node of its own; its claim delivers /dev/uinput,
the 32 legacy input event nodes by number (character major 13, minors 64 to 95, at
/dev/input/event0 to /dev/input/event31), and /dev/uhid on a machine whose ``spec.modules``
declares ``uhid``. The event nodes are stated by number because a peripheral that connects over
the air registers its node after the claim was prepared.

rules: bluetooth.event-numbers-exclusive. Those 32 numbers would
otherwise include the nodes of devices that are exclusive to someone else (a laptop's i8042
keyboard, the power button, a sound card's jacks, a CEC remote: rules: sharing.sound-card), and a
Bluetooth claimant could read the built-in keyboard. So a number is left out when the walk finds
its event node in the subtree of a bus or board device other than the adapter. Nodes under the
adapter (a connected peripheral's input device sits below the adapter's hci) stay in. The set is
the walk's, so the plugin's reconcile pass writes the current one and a number its owner gives up
returns to the claim for the next container.

rules: bluetooth.virtual-nodes. A node under ``/devices/virtual/`` (uinput's, uhid's) has
nothing in sysfs that ties it to an hci: the kernel hangs uhid's devices under the uhid misc
device and uinput's under ``/devices/virtual/input``, and their ``phys`` is a string the creating
process wrote (BlueZ writes the adapter's address there). An address is not an identity (clone
CSR8510 dongles all report ``00:1a:7d:da:71:13``), so the ``phys`` proves the node an adapter's
only when exactly one adapter of the node reports that address and every adapter's address is
known; the node is then that adapter's claim's alone. One whose address several adapters report,
or one adapter's while another's address is unknown, goes to no claim (fail closed). One that
names no adapter of this node (a key remapper's uinput device) stays in while a single Bluetooth
claim is prepared on the node, and is left out of all of them with two or more: one tenant must
not read another's keyboard.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import NamedTuple, Protocol

from ..sysfs.model import DevNode, SysDevice
from .model import LeftOut
from .names import device_name

# Misc minors 223 and 239 (the kernel's admin-guide/devices), and the evdev range.
UINPUT = DevNode("uinput", "c", 10, 223)
UHID = DevNode("uhid", "c", 10, 239)
EVDEV_MAJOR = 13
LEGACY_EVENT_FIRST = 64
LEGACY_EVENT_COUNT = 32
LEGACY_EVENTS = tuple(DevNode(f"input/event{i}", "c", EVDEV_MAJOR, LEGACY_EVENT_FIRST + i)
                      for i in range(LEGACY_EVENT_COUNT))
VIRTUAL = "/devices/virtual/"


class _Hardware(Protocol):
    @property
    def bus(self) -> str: ...

    @property
    def address(self) -> str: ...


def is_legacy_event(node: DevNode | None) -> bool:
    return (node is not None and node.type == "c" and node.major == EVDEV_MAJOR
            and LEGACY_EVENT_FIRST <= node.minor < LEGACY_EVENT_FIRST + LEGACY_EVENT_COUNT)


def legacy_event_devices(devs: Iterable[SysDevice]) -> list[SysDevice]:
    """The devices of a snapshot whose node holds one of the 32 legacy event numbers."""
    return [d for d in devs if is_legacy_event(d.node)]


def event_owner(dev: SysDevice, hardware: Mapping[str, _Hardware],
                adapter: Collection[str]) -> _Hardware | None:
    """The bus or board device other than the adapter in whose subtree ``dev`` lies, or None
    when it lies under the adapter, under /devices/virtual/, or under no such device.

    The nearest enclosing considered device decides: a peripheral's node below the adapter's
    interface is the adapter's even though the USB host controller encloses both.
    """
    if dev.path.startswith(VIRTUAL):
        return None
    for anc in dev.ancestors():
        if anc in adapter:
            return None
        hw = hardware.get(anc)
        if hw is not None:
            return hw
    return None


class Adapters(NamedTuple):
    """The node's Bluetooth adapters as the virtual event nodes' rule needs them."""

    # address ("aa:bb:cc:dd:ee:ff") -> the device names of the adapters that report it (clones
    # report one address: more than one name then)
    by_address: Mapping[str, tuple[str, ...]]
    claims: int = 0  # Bluetooth claims prepared on the node (the agent and the plugin know them)
    unknown: tuple[str, ...] = ()  # the adapters whose address the tree does not say


NO_ADAPTERS = Adapters({})


def phys_of(dev: SysDevice, devs: Mapping[str, SysDevice]) -> str:
    """The ``phys`` of the input device an event node belongs to, lowercase, "" when none.

    The input device's uevent carries it quoted (``PHYS="aa:bb:cc:dd:ee:ff"``)."""
    for anc in dev.ancestors():
        parent = devs.get(anc)
        if parent is not None and parent.subsystem == "input":
            raw = parent.props.get("PHYS") or parent.attr("phys") or ""
            return raw.strip().strip('"').strip().lower()
    return ""


def adapter_addresses(devs: Iterable[SysDevice]) -> dict[str, str]:
    """Each adapter's address, by the sysfs path of the device that holds its hci (the btusb
    interface). An hci whose address is unknown (a recording of a newer kernel) names none."""
    found: dict[str, str] = {}
    for d in devs:
        if d.subsystem != "bluetooth" or d.props.get("DEVTYPE") != "host":
            continue
        address = (d.attr("address") or "").lower()
        holder, sep, _ = d.path.rpartition("/bluetooth/")
        if sep and address and address != "00:00:00:00:00:00":
            found[holder] = address
    return found


def virtual_owner(dev: SysDevice, devs: Mapping[str, SysDevice], own: Collection[str],
                  adapters: Adapters) -> str | None:
    """Why a virtual event node is not this adapter's claim's, or None when it stays in.

    rules: bluetooth.virtual-nodes. Only an address one adapter alone reports, on a node where
    every adapter's address is known, proves a node an adapter's; an address that proves
    nothing names no claim at all."""
    phys = phys_of(dev, devs)
    holders = tuple(adapters.by_address.get(phys, ())) if phys else ()
    unproved = ", so no claim gets it: which radio it came through cannot be proved"
    if len(holders) > 1:
        return (f"a virtual input device whose phys {phys} is the address of {len(holders)} "
                f"Bluetooth adapters ({', '.join(holders)}){unproved}")
    if holders and phys in own:
        if not adapters.unknown:
            return None
        others = ", ".join(adapters.unknown)
        return (f"a virtual input device whose phys {phys} is this adapter's address, but the "
                f"address of Bluetooth adapter{'s' if len(adapters.unknown) > 1 else ''} "
                f"{others} is unknown{unproved}")
    if holders:
        return f"Bluetooth adapter {holders[0]} (a virtual input device whose phys is its address)"
    if adapters.claims >= 2:
        return (f"a virtual input device that names no adapter, left out while "
                f"{adapters.claims} Bluetooth claims are prepared on this node")
    return None


def bluetooth_nodes(usbfs: DevNode | None, uhid: bool, events: Iterable[SysDevice],
                    hardware: Mapping[str, _Hardware],
                    adapter: Collection[str], *, devs: Mapping[str, SysDevice] | None = None,
                    own: Collection[str] = (), adapters: Adapters = NO_ADAPTERS
                    ) -> tuple[tuple[DevNode, ...], tuple[LeftOut, ...]]:
    """The nodes an adapter's claim delivers, and the event numbers left out with their owners.

    ``events`` are the snapshot's legacy event devices, ``hardware`` the considered bus and board
    devices by sysfs path, ``adapter`` the sysfs paths that are the adapter (its USB device and
    its btusb interfaces); ``devs`` the snapshot's devices, ``own`` this adapter's addresses and
    ``adapters`` the node's, for the virtual nodes.
    """
    taken: dict[int, LeftOut] = {}
    for dev in events:
        node = dev.node
        if not is_legacy_event(node) or node is None or node.minor in taken:
            continue
        if dev.path.startswith(VIRTUAL):
            why = virtual_owner(dev, devs or {}, own, adapters)
            if why is not None:
                taken[node.minor] = LeftOut(LEGACY_EVENTS[node.minor - LEGACY_EVENT_FIRST],
                                            node.name, why)
            continue
        owner = event_owner(dev, hardware, adapter)
        if owner is not None:
            taken[node.minor] = LeftOut(LEGACY_EVENTS[node.minor - LEGACY_EVENT_FIRST],
                                        node.name, f"{owner.bus} {owner.address}",
                                        device_name(owner.bus, owner.address))
    nodes: list[DevNode] = [usbfs] if usbfs else []
    nodes.append(UINPUT)
    nodes.extend(n for n in LEGACY_EVENTS if n.minor not in taken)
    if uhid:
        nodes.append(UHID)
    return tuple(nodes), tuple(taken[m] for m in sorted(taken))
