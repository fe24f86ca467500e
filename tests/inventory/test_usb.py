"""USB devices (inventory/usb.py): the ones the machine depends on, whole libusb devices, driven
interfaces each with the usbfs node, a device a program holds, Bluetooth radios, serial lines.

rules: usb.machine-depends, usb.unclaimed-means-unpublished, serial.no-usbfs
"""

from __future__ import annotations

from pathlib import Path

import pytest

from liken_devices.inventory import Context, Facts, Inventory, MachineSpec, SerioEntry
from liken_devices.inventory.catalogs import Catalogs, ModuleCatalog
from liken_devices.inventory.model import Reason
from liken_devices.inventory.policy import build_inventory
from liken_devices.kube.machine import build_status
from liken_devices.sysfs.reader import read_sysfs
from liken_devices.sysfs.umockdev import load_recording
from liken_devices.views import explain_json, report_text
from tests.support.corpus import recording
from tests.support.sysfs_builder import Dev, SysfsBuilder

from .support import bluetooth, cec_adapter, dev, hid_interface, names

USBFS = "/dev/bus/usb/001/007"


@pytest.fixture
def b(tmp_path: Path) -> SysfsBuilder:
    return SysfsBuilder(tmp_path / "sys")


def scan(b: SysfsBuilder, roles: frozenset[str] | None = frozenset(),
         machine: MachineSpec | None = None, catalogs: Catalogs | None = None) -> Inventory:
    ctx = Context(Facts(roles, None if roles is not None else "unreadable"),
                  machine or MachineSpec(), catalogs or Catalogs())
    return build_inventory(read_sysfs(b.root), ctx)


def reason(inv: Inventory, address: str) -> str | None:
    [o] = [o for o in inv.outcomes if o.address == address]
    return o.reason


def paths(inv: Inventory, name: str) -> list[str]:
    return [n.path for n in inv.by_name()[name].nodes]


def composite(b: SysfsBuilder, *, disk: bool = False, console_tty: bool = False) -> Dev:
    """A USB device with a HID interface, and a disk or a serial line on another interface."""
    usb = b.usb_device("1-3", devnum=7, vendor="0781", product="5581")
    hid = b.usb_interface(usb, "1.0", driver="usbhid", cls=3)
    b.node(b.device(hid, "0003:0781:5581.0001", "hid"), "hidraw", "hidraw0", 240, 0,
           subdir="hidraw")
    if disk:
        ms = b.usb_interface(usb, "1.1", driver="usb-storage", cls=8)
        sda = b.node(ms, "block", "sda", 8, 0, block=True, subdir="host0/target0:0:0/block")
        b.node(sda, "block", "sda1", 8, 1, block=True)
    if console_tty:
        acm = b.usb_interface(usb, "1.2", driver="cdc_acm", cls=2)
        b.node(acm, "tty", "ttyACM0", 166, 0, subdir="tty")
        b.console("ttyACM0")
    return usb


# -- No usbfs for a USB device the machine depends on -------------------------------------------


def test_an_interface_holding_a_roles_partition_is_withheld_and_no_claim_gets_the_usbfs_node(
        b: SysfsBuilder) -> None:
    composite(b, disk=True)
    inv = scan(b, roles=frozenset({"sda1"}))
    assert reason(inv, "1-3:1.1") == Reason.STORAGE_ROLE
    assert paths(inv, "usb-1-3-1-0") == ["/dev/hidraw0"]  # the sibling, without usbfs
    # A spare disk on the same device: nothing depends on it, usbfs stays.
    inv = scan(b, roles=frozenset({"nvme0n1p3"}))
    assert paths(inv, "usb-1-3-1-0") == ["/dev/hidraw0", USBFS]


def test_with_facts_unreadable_any_block_device_takes_the_usbfs_node_from_its_siblings(
        b: SysfsBuilder) -> None:
    composite(b, disk=True)
    inv = scan(b, roles=None)
    assert reason(inv, "1-3:1.1") == Reason.FACTS_UNREADABLE
    assert paths(inv, "usb-1-3-1-0") == ["/dev/hidraw0"]


def test_an_interface_holding_the_console_takes_the_usbfs_node_from_its_siblings(
        b: SysfsBuilder) -> None:
    composite(b, console_tty=True)
    inv = scan(b)
    assert reason(inv, "1-3:1.2") == Reason.ONLY_RESERVED
    assert paths(inv, "usb-1-3-1-0") == ["/dev/hidraw0"]


def test_a_program_holding_a_sibling_of_the_machines_disk_gets_no_usbfs_node(
        b: SysfsBuilder) -> None:
    usb = composite(b, disk=True)
    b.usb_interface(usb, "1.3", driver="usbfs", cls=0xFF)
    inv = scan(b, roles=frozenset({"sda1"}))
    assert reason(inv, "1-3:1.3") == Reason.HELD_BY_PROGRAM
    assert inv.lookup("usb-1-3-1-3") is None  # absent for its claim: no node at all


PULSE8 = SerioEntry("pulse8-cec", "2548", "1002")


def test_a_serio_adapter_never_delivers_its_usbfs_node_before_its_driver_binds(
        b: SysfsBuilder) -> None:
    usb = b.usb_device("1-5", devnum=6, vendor="2548", product="1002")
    b.usb_interface(usb, "1.0", cls=2)
    b.usb_interface(usb, "1.1", cls=0x0A)
    inv = scan(b, machine=MachineSpec(serio=(PULSE8,)))
    assert inv.devices == ()
    assert reason(inv, "1-5") == Reason.ONLY_RESERVED
    # Without the entry the same device publishes whole for libusb.
    assert [d.name for d in scan(b).devices] == ["usb-1-5"]


def test_a_serio_adapter_never_delivers_its_usbfs_node_while_a_program_holds_it(
        b: SysfsBuilder) -> None:
    usb = b.usb_device("1-5", devnum=6, vendor="2548", product="1002")
    b.usb_interface(usb, "1.0", driver="usbfs", cls=2)
    inv = scan(b, machine=MachineSpec(serio=(PULSE8,)))
    assert reason(inv, "1-5:1.0") == Reason.HELD_BY_PROGRAM
    assert inv.lookup("usb-1-5-1-0") is None
    assert scan(b).lookup("usb-1-5-1-0") is not None  # without the entry, its claim keeps it


# -- Unclaimed means unpublished ----------------------------------------------------------------


def rtl_sdr(b: SysfsBuilder, tmp_path: Path) -> Catalogs:
    usb = b.usb_device("1-2", devnum=3, vendor="0bda", product="2838")
    b.usb_interface(usb, "1.0", cls=0xFF)
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "modules.alias").write_text("alias usb:v1234p5678d*dc*dsc*dp*ic*isc*ip*in* "
                                           "dvb_usb_rtl28xxu\n")
    (modules / "modules.builtin").write_text("")
    (modules / "modules.dep").write_text("kernel/drivers/media/dvb_usb_rtl28xxu.ko:\n")
    return Catalogs(ModuleCatalog(modules))


def test_a_whole_libusb_device_is_neither_unclaimed_nor_in_the_report(
        b: SysfsBuilder, tmp_path: Path) -> None:
    inv = scan(b, catalogs=rtl_sdr(b, tmp_path))
    assert [d.name for d in inv.devices] == ["usb-1-2"]
    assert inv.unclaimed == ()
    assert build_status(inv, None, None, None)["hardware"]["unclaimed"] == []
    assert "dvb_usb_rtl28xxu" not in report_text("node-1", inv, ())


def test_explain_says_a_whole_device_is_published_for_libusb_and_names_the_kernels_modules(
        b: SysfsBuilder, tmp_path: Path) -> None:
    inv = scan(b, catalogs=rtl_sdr(b, tmp_path))
    [whole] = [o for o in inv.outcomes if o.address == "1-2"]
    assert whole.devices == ("usb-1-2",)
    assert "published whole for libusb" in whole.detail
    assert "dvb_usb_rtl28xxu would drive it instead" in whole.detail
    hardware = {h["address"]: h for h in explain_json(inv)["hardware"]}
    assert "dvb_usb_rtl28xxu" in hardware["1-2"]["detail"]
    assert explain_json(inv)["unclaimed"] == []


def test_unclaimed_means_unpublished_on_a_recording() -> None:
    """The T60p's Bluetooth radio has no driver on any interface: published whole, and
    nothing of it is unclaimed."""
    snap = load_recording(recording("thinkpad-t60p-systemd-sys-script.umockdev"))
    inv = build_inventory(snap, Context(Facts(frozenset())))
    assert "usb-4-1" in inv.by_name()
    assert not [u for u in inv.unclaimed if u.path.startswith(inv.by_name()["usb-4-1"].source)]


# -- interfaces, whole devices, Bluetooth radios, serial lines -----------------------------------


def test_usb_interfaces_each_deliver_the_usbfs_node(b: SysfsBuilder) -> None:
    """USB devices: each driven interface is its own device, each with the same usbfs node."""
    usb = b.usb_device("1-2", devnum=5)
    hid_interface(b, usb, "1.0", 0)
    hid_interface(b, usb, "1.1", 1)
    inv = scan(b)
    assert names(inv) == ["usb-1-2-1-0", "usb-1-2-1-1"]
    for name in names(inv):
        assert paths(inv, name)[-1] == "/dev/bus/usb/001/005"
        assert dev(inv, name).attributes["subsystem"] == "hidraw"  # usbfs does not count


def test_usb_device_with_no_driver_publishes_whole(b: SysfsBuilder) -> None:
    """USB devices with no kernel driver: whole, usbfs only, class from the first interface."""
    usb = b.usb_device("1-2", devnum=9, vendor="03c3", product="120a")
    b.usb_interface(usb, "1.1", cls=0xFF)
    b.usb_interface(usb, "1.0", cls=0x0B)
    inv = scan(b)
    assert names(inv) == ["usb-1-2"]
    d = dev(inv, "usb-1-2")
    assert paths(inv, "usb-1-2") == ["/dev/bus/usb/001/009"]
    assert d.attributes["classCode"] == "0b" and d.attributes["class"] == "smart-card"
    assert "driver" not in d.attributes and "subsystem" not in d.attributes
    assert not d.shareable
    assert reason(inv, "1-2:1.0") == Reason.FOLDED


def test_driven_interface_replaces_the_whole_device(b: SysfsBuilder) -> None:
    """USB devices with no kernel driver: once a module binds an interface, it publishes."""
    usb = b.usb_device("1-2")
    iface = b.usb_interface(usb, "1.0", cls=3)
    assert names(scan(b)) == ["usb-1-2"]
    b.set_driver(iface, "usb", "usbhid")
    b.node(b.device(iface, "0003:1234:5678.0001", "hid"), "hidraw", "hidraw0", 240, 0,
           subdir="hidraw")
    assert names(scan(b)) == ["usb-1-2-1-0"]


def test_interface_held_through_usbfs_leaves_the_slice(b: SysfsBuilder) -> None:
    """USB devices: a device leaves the slice while a program holds an interface via usbfs."""
    usb = b.usb_device("1-2", devnum=4)
    b.usb_interface(usb, "1.0", driver="usbfs", cls=0xFF)
    inv = scan(b)
    assert names(inv) == []
    assert reason(inv, "1-2:1.0") == Reason.HELD_BY_PROGRAM
    # The claim that holds it keeps its usbfs node (the hardware is present).
    assert inv.lookup("usb-1-2-1-0") == (read_sysfs(b.root).devices[usb.path].node,)


def test_bluetooth_adapter_delivers_the_fixed_set(b: SysfsBuilder) -> None:
    """Bluetooth adapters: usbfs, /dev/uinput and the 32 legacy event nodes 13:64..13:95."""
    bluetooth(b)
    inv = scan(b)
    assert names(inv) == ["usb-1-8-1-0"]
    d = dev(inv, "usb-1-8-1-0")
    assert not d.shareable and "subsystem" not in d.attributes
    nodes = d.nodes
    assert nodes[0].path == "/dev/bus/usb/001/003"
    assert (nodes[1].path, nodes[1].major, nodes[1].minor) == ("/dev/uinput", 10, 223)
    events = [n for n in nodes if n.major == 13]
    assert [(n.minor, n.path) for n in events] == [(64 + i, f"/dev/input/event{i}")
                                                   for i in range(32)]
    assert "/dev/uhid" not in [n.path for n in nodes]
    assert reason(inv, "1-8:1.1") == Reason.FOLDED


def test_bluetooth_uhid_when_declared(b: SysfsBuilder) -> None:
    """Bluetooth adapters: /dev/uhid on a machine whose spec.modules declares uhid."""
    bluetooth(b)
    inv = scan(b, machine=MachineSpec(modules=("uhid",)))
    assert paths(inv, "usb-1-8-1-0")[-1] == "/dev/uhid"
    assert dev(inv, "usb-1-8-1-0").nodes[-1].minor == 239


def test_serial_line_before_attachment_publishes_nothing(b: SysfsBuilder) -> None:
    """Serial-line adapters: the tty is never published; before attachment, nothing."""
    cec_adapter(b, attached=False)
    inv = scan(b, machine=MachineSpec(serio=(PULSE8,)))
    assert "usb-1-5-1-0" not in names(inv)
    assert reason(inv, "1-5:1.0") == Reason.ONLY_RESERVED
    assert all(n.name != "ttyACM0" for d in inv.devices for n in d.nodes)


def test_serial_line_without_entry_is_an_ordinary_tty(b: SysfsBuilder) -> None:
    """Serial-line adapters: before an entry declared it, the bare name was the tty's device."""
    cec_adapter(b, attached=False)
    inv = scan(b)
    assert paths(inv, "usb-1-5-1-0") == ["/dev/ttyACM0", "/dev/bus/usb/001/006"]


def test_serio_entry_serial_must_match(b: SysfsBuilder) -> None:
    """rules: serial.one-matching-rule. An entry with a serial matches only that unit."""
    cec_adapter(b, attached=False)
    other = SerioEntry("pulse8-cec", "2548", "1002", "OTHER")
    assert "usb-1-5-1-0" in names(scan(b, machine=MachineSpec(serio=(other,))))

