"""Which claim holds a USB device's usbfs node, case by case (rules: usb.usbfs-per-interface;
rules: bluetooth.deliveries, usb.machine-depends).

Every driven interface delivers its device's usbfs node, unless the machine depends on the
device (an interface holds a storage role's partition, any block device while the facts are
unreadable, or the console); a Bluetooth adapter is a btusb interface with its hci registered.
"""

from __future__ import annotations

from pathlib import Path

from liken_devices.inventory import (
    Context,
    Facts,
    Inventory,
    MachineSpec,
    SerioEntry,
    build_inventory,
)
from liken_devices.inventory.model import Reason
from liken_devices.sysfs.model import Snapshot, SysDevice
from liken_devices.sysfs.reader import read_sysfs
from tests.support.sysfs_builder import SysfsBuilder


def scan(b: SysfsBuilder, roles: frozenset[str] | None = frozenset()) -> Inventory:
    facts = Facts(roles, None if roles is not None else "unreadable")
    return build_inventory(read_sysfs(b.root), Context(facts, MachineSpec()))


def paths(inv: Inventory) -> dict[str, list[str]]:
    return {d.name: [n.path for n in d.nodes] for d in inv.devices}


def test_with_facts_unreadable_a_device_without_block_nodes_keeps_its_usbfs_node(
        tmp_path: Path) -> None:
    b = SysfsBuilder(tmp_path / "sys")
    usb = b.usb_device("1-2", devnum=4)
    iface = b.usb_interface(usb, "1.0", driver="usbhid", cls=3)
    b.node(iface, "hidraw", "hidraw0", 240, 0, subdir="hidraw")
    assert paths(scan(b, roles=None)) == {
        "usb-1-2-1-0": ["/dev/hidraw0", "/dev/bus/usb/001/004"]}


def test_a_btusb_device_before_its_hci_registers_is_no_bluetooth_adapter(tmp_path: Path) -> None:
    """No hci yet: no Bluetooth device (no uinput, no event numbers); its interfaces publish
    as any driven interface with nothing of their own."""
    b = SysfsBuilder(tmp_path / "sys")
    usb = b.usb_device("1-8", devnum=3, vendor="8087", product="0026")
    b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
    b.usb_interface(usb, "1.1", driver="btusb", cls=0xE0)
    inv = scan(b)
    assert not any(n.name == "uinput" for d in inv.devices for n in d.nodes)
    assert [d.name for d in inv.devices if d.kind == "bluetooth"] == []


def test_the_adapter_is_the_btusb_interface_with_the_hci(tmp_path: Path) -> None:
    """The hci may sit under the second btusb interface: that one is the adapter, the other
    is folded into it."""
    b = SysfsBuilder(tmp_path / "sys")
    usb = b.usb_device("1-8", devnum=3, vendor="8087", product="0026")
    b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
    radio = b.usb_interface(usb, "1.1", driver="btusb", cls=0xE0)
    b.device(radio, "hci0", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth")
    inv = scan(b)
    assert [(d.name, d.kind) for d in inv.devices] == [("usb-1-8-1-1", "bluetooth")]
    assert paths(inv)["usb-1-8-1-1"][:2] == ["/dev/bus/usb/001/003", "/dev/uinput"]


def test_a_serio_adapters_interfaces_wait_for_their_driver_as_unclaimed(tmp_path: Path) -> None:
    """The machine's adapter publishes nothing before its driver binds; its interfaces are
    hardware with no driver (rules: machine.unclaimed), the device is the
    machine's."""
    b = SysfsBuilder(tmp_path / "sys")
    usb = b.usb_device("1-5", devnum=6, vendor="2548", product="1002")
    b.usb_interface(usb, "1.0", cls=2)
    b.usb_interface(usb, "1.1", cls=0x0A)
    machine = MachineSpec(serio=(SerioEntry("pulse8-cec", "2548", "1002"),))
    inv = build_inventory(read_sysfs(b.root), Context(Facts(frozenset()), machine))
    assert inv.devices == ()
    assert sorted(u.address for u in inv.unclaimed) == ["1-5:1.0", "1-5:1.1"]
    assert {o.address: o.reason for o in inv.outcomes if o.address.startswith("1-5")} == {
        "1-5": Reason.ONLY_RESERVED, "1-5:1.0": Reason.NO_DRIVER, "1-5:1.1": Reason.NO_DRIVER}


def test_an_undriven_interface_beside_a_driven_one_is_unclaimed(tmp_path: Path) -> None:
    b = SysfsBuilder(tmp_path / "sys")
    usb = b.usb_device("1-2", devnum=4)
    iface = b.usb_interface(usb, "1.0", driver="usbhid", cls=3)
    b.node(iface, "hidraw", "hidraw0", 240, 0, subdir="hidraw")
    b.usb_interface(usb, "1.1", cls=0xFF)
    inv = scan(b)
    assert paths(inv) == {"usb-1-2-1-0": ["/dev/hidraw0", "/dev/bus/usb/001/004"]}
    assert [u.address for u in inv.unclaimed] == ["1-2:1.1"]
    assert [o.reason for o in inv.outcomes if o.address == "1-2:1.1"] == [Reason.NO_DRIVER]


def test_a_driverless_device_without_a_usbfs_node_publishes_nothing_and_says_so() -> None:
    usb = "/devices/pci0000:00/0000:00:14.0/usb1/1-3"
    snap = Snapshot({
        usb: SysDevice(usb, "usb", "usb", {"DEVTYPE": "usb_device"},
                       {"idVendor": b"1234", "idProduct": b"5678"}),
        f"{usb}/1-3:1.0": SysDevice(f"{usb}/1-3:1.0", "usb", None,
                                    {"DEVTYPE": "usb_interface", "INTERFACE": "255/0/0"})}, ())
    inv = build_inventory(snap, Context(Facts(frozenset()), MachineSpec()))
    assert inv.devices == ()
    assert [o.reason for o in inv.outcomes if o.address == "1-3"] == [Reason.NO_NODE]


def _device_reasons(inv: Inventory, address: str) -> list[tuple[Reason | None, str]]:
    return [(o.reason, o.detail) for o in inv.outcomes if o.address == address]


def test_a_device_a_program_holds_whole_is_out_of_the_slice_and_says_so(tmp_path: Path) -> None:
    """rules: usb.held-by-program. When a libusb program holds every interface it detached
    (the rest have no driver), the USB device itself is out of the slice, and the report says so
    of the device, naming the held interfaces, until the program lets go."""
    held_whole = (Reason.HELD_BY_PROGRAM,
                  "1-5:1.0 held; published whole again when the program lets go")
    for second in (None, "no driver"):
        b = SysfsBuilder(tmp_path / f"sys-{second}")
        usb = b.usb_device("1-5", devnum=6, vendor="1234", product="5678")
        b.usb_interface(usb, "1.0", driver="usbfs", cls=0xFF)
        if second:
            b.usb_interface(usb, "1.1", cls=0xFF)
        inv = scan(b)
        assert inv.devices == ()
        assert _device_reasons(inv, "1-5") == [held_whole]
        assert _device_reasons(inv, "1-5:1.0") == [(Reason.HELD_BY_PROGRAM,
                                                    "until the program lets go")]


def test_a_device_with_a_driven_interface_beside_a_held_one_is_not_held_whole(
        tmp_path: Path) -> None:
    """A kernel driver on a sibling: that interface is published (with the usbfs node), only
    the held interface is out, and nothing is said of the device as a whole."""
    b = SysfsBuilder(tmp_path / "sys")
    usb = b.usb_device("1-5", devnum=6, vendor="1234", product="5678")
    b.usb_interface(usb, "1.0", driver="usbfs", cls=0xFF)
    hid = b.usb_interface(usb, "1.1", driver="usbhid", cls=3)
    b.node(hid, "hidraw", "hidraw0", 240, 0, subdir="hidraw")
    inv = scan(b)
    assert paths(inv) == {"usb-1-5-1-1": ["/dev/hidraw0", "/dev/bus/usb/001/006"]}
    assert _device_reasons(inv, "1-5") == []
    assert _device_reasons(inv, "1-5:1.0") == [(Reason.HELD_BY_PROGRAM,
                                                "until the program lets go")]
