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
its event node in the subtree of a bus or board device other than the adapter. Nodes under
``/devices/virtual/`` (uinput and uhid devices: the Bluetooth stack's own) and under the adapter
(a connected peripheral's input device sits below the adapter's hci) stay in. The set is the
walk's, so the plugin's reconcile pass writes the current one and a number its owner gives up
returns to the claim for the next container.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Protocol

from ..sysfs.model import DevNode, SysDevice
from .model import LeftOut

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


def bluetooth_nodes(usbfs: DevNode | None, uhid: bool, events: Iterable[SysDevice],
                    hardware: Mapping[str, _Hardware],
                    adapter: Collection[str]) -> tuple[tuple[DevNode, ...], tuple[LeftOut, ...]]:
    """The nodes an adapter's claim delivers, and the event numbers left out with their owners.

    ``events`` are the snapshot's legacy event devices, ``hardware`` the considered bus and board
    devices by sysfs path, ``adapter`` the sysfs paths that are the adapter (its USB device and
    its btusb interfaces).
    """
    taken: dict[int, LeftOut] = {}
    for dev in events:
        node = dev.node
        if not is_legacy_event(node) or node is None or node.minor in taken:
            continue
        owner = event_owner(dev, hardware, adapter)
        if owner is not None:
            taken[node.minor] = LeftOut(LEGACY_EVENTS[node.minor - LEGACY_EVENT_FIRST],
                                        node.name, f"{owner.bus} {owner.address}")
    nodes: list[DevNode] = [usbfs] if usbfs else []
    nodes.append(UINPUT)
    nodes.extend(n for n in LEGACY_EVENTS if n.minor not in taken)
    if uhid:
        nodes.append(UHID)
    return tuple(nodes), tuple(taken[m] for m in sorted(taken))
