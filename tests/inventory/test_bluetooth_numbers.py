"""The numbers a Bluetooth adapter's claim delivers, stated literally (rules: bluetooth.deliveries).

The rule: /dev/uinput, the 32 legacy input event nodes (character major 13,
minors 64 to 95, at /dev/input/event0 to /dev/input/event31) and, where ``spec.modules`` declares
``uhid``, /dev/uhid. The kernel's admin-guide/devices gives uinput misc minor 223 and uhid misc
minor 239 (character major 10). Every expected number here is a literal from those texts, never
the module's own constants, so a changed constant or a widened range fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from liken_devices.inventory import Context, Facts, MachineSpec, build_inventory
from liken_devices.inventory.bluetooth import bluetooth_nodes
from liken_devices.inventory.model import Inventory
from liken_devices.sysfs.model import DevNode, SysDevice
from liken_devices.sysfs.reader import read_sysfs
from tests.support.sysfs_builder import Dev, SysfsBuilder

RADIO = "usb-1-8-1-0"
KEYBOARD = "usb-1-2-1-0"


def event(b: SysfsBuilder, parent: Dev | str, n: int, *, subdir: str | None = "input") -> Dev:
    """An input device with its event node ``input/event<n>`` at 13:(64+n), as evdev makes it."""
    inp = b.device(parent, f"input{200 + n}", "input", {"NAME": f'"dev {n}"'}, subdir=subdir)
    return b.node(inp, "input", f"event{n}", 13, 64 + n, devname=f"input/event{n}")


def machine(root: Path, owned: tuple[int, ...] = (), virtual: range = range(0)) -> SysfsBuilder:
    """A radio on 1-8; a USB keyboard on 1-2 whose input devices hold the event numbers
    ``owned``; the Bluetooth stack's virtual input devices holding ``virtual``."""
    b = SysfsBuilder(root)
    usb = b.usb_device("1-8", devnum=3, vendor="8087", product="0026")
    radio = b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
    b.device(radio, "hci0", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth")
    kbd = b.usb_device("1-2", devnum=4)
    iface = b.usb_interface(kbd, "1.0", driver="usbhid", cls=3)
    for n in owned:
        event(b, f"{iface.path}/0003:1234:5678.{n:04X}", n)
    for n in virtual:
        event(b, "/devices/virtual/input", n, subdir=None)
    return b


def inventory(b: SysfsBuilder, modules: tuple[str, ...] = ()) -> Inventory:
    return build_inventory(read_sysfs(b.root), Context(Facts(frozenset()), MachineSpec(modules)))


def numbers(inv: Inventory, name: str) -> list[tuple[str, str, int, int]]:
    return [(n.name, n.type, n.major, n.minor) for n in inv.by_name()[name].nodes]


def radio_events(inv: Inventory) -> list[int]:
    return [minor for name, typ, major, minor in numbers(inv, RADIO) if major == 13]


@pytest.mark.parametrize("modules", [("uhid",), ()])
def test_the_claim_states_uinput_uhid_and_the_32_event_numbers_by_literal(
        tmp_path: Path, modules: tuple[str, ...]) -> None:
    inv = inventory(machine(tmp_path / "sys"), modules)
    got = numbers(inv, RADIO)
    assert got[0][0] == "bus/usb/001/003"  # the adapter's usbfs node comes first
    assert got[1] == ("uinput", "c", 10, 223)
    assert got[2:34] == [(f"input/event{i}", "c", 13, 64 + i) for i in range(32)]
    if modules:
        assert got[34:] == [("uhid", "c", 10, 239)]
    else:
        assert got[34:] == []
    assert [n.path for n in inv.by_name()[RADIO].nodes][1:3] == ["/dev/uinput",
                                                                 "/dev/input/event0"]


def test_a_33rd_event_node_of_another_device_is_not_a_bluetooth_number(tmp_path: Path) -> None:
    """event32 (13:96) lies past the 32: the walk does not fail on it, the radio's claim does not
    deliver it, no number is left out for it, and its owner keeps it."""
    b = machine(tmp_path / "sys", owned=(32,), virtual=range(32))
    inv = inventory(b)
    assert radio_events(inv) == list(range(64, 96))
    assert inv.by_name()[RADIO].left_out == ()
    assert ("input/event32", "c", 13, 96) in numbers(inv, KEYBOARD)


def test_the_last_of_the_32_owned_by_another_device_is_left_out(tmp_path: Path) -> None:
    """event31 (13:95) is the last number of the range: held by the keyboard, it is left out."""
    inv = inventory(machine(tmp_path / "sys", owned=(31, 32), virtual=range(31)))
    assert radio_events(inv) == list(range(64, 95))
    assert [(x.node.minor, x.host_name, x.owner) for x in inv.by_name()[RADIO].left_out] == [
        (95, "input/event31", "usb 1-2:1.0")]


def test_the_first_of_the_32_owned_by_another_device_is_left_out(tmp_path: Path) -> None:
    """event0 (13:64) is the first number: held by the keyboard, it is left out, and 13:63
    (below the range) held by the keyboard too changes nothing."""
    b = machine(tmp_path / "sys", owned=(0,))
    kbd_iface = "/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0"
    inp = b.device(f"{kbd_iface}/0003:1234:5678.00FF", "input199", "input", subdir="input")
    b.node(inp, "input", "mice", 13, 63, devname="input/mice")
    inv = inventory(b)
    assert radio_events(inv) == list(range(65, 96))
    assert [x.node.minor for x in inv.by_name()[RADIO].left_out] == [64]


def test_a_node_of_major_13_outside_the_range_or_of_block_type_is_not_counted(
        tmp_path: Path) -> None:
    """Only major 13 holds the legacy numbers: the keyboard's character node 14:70 takes no
    number away."""
    b = machine(tmp_path / "sys")
    kbd_iface = "/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0"
    inp = b.device(f"{kbd_iface}/0003:1234:5678.00FE", "input198", "input", subdir="input")
    b.node(inp, "input", "odd0", 14, 70, devname="odd0")
    inv = inventory(b)
    assert radio_events(inv) == list(range(64, 96))
    assert inv.by_name()[RADIO].left_out == ()


class _Hw(NamedTuple):
    bus: str
    address: str


def test_bluetooth_nodes_takes_only_the_32_numbers_from_the_events_it_is_given() -> None:
    """The function itself: an event device past the range (13:96) or of another major given
    to it is not a number of the claim and is not left out, and the first owner of a number
    found is the one named."""
    kbd = "/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0"
    hardware = {kbd: _Hw("usb", "1-2:1.0"), "/devices/platform/i8042": _Hw("platform", "i8042")}

    def ev(path: str, major: int, minor: int) -> SysDevice:
        return SysDevice(path, "input", None, {},
                         node=DevNode(f"input/event{minor - 64}", "c", major, minor))

    events = [ev(f"{kbd}/input/input1/event32", 13, 96), ev(f"{kbd}/input/input2/x", 14, 70),
              ev("/devices/platform/i8042/serio0/input/input3/event5", 13, 69),
              ev(f"{kbd}/input/input4/event5", 13, 69)]
    usbfs = DevNode("bus/usb/001/003", "c", 189, 2)
    nodes, left = bluetooth_nodes(usbfs, False, events, hardware, {"/adapter"})
    assert [(n.name, n.major, n.minor) for n in nodes] == [
        ("bus/usb/001/003", 189, 2), ("uinput", 10, 223),
        *((f"input/event{i}", 13, 64 + i) for i in range(32) if i != 5)]
    assert [(x.node.minor, x.owner) for x in left] == [(69, "platform i8042")]
