"""Which hardware is considered and which of it owns each node (inventory/hardware.py): board
devices outside every PCI or USB device, the outermost bound one owning its subtree.

rules: hardware.considered, hardware.node-owner, usb.bus-devices-only

Trees are built on disk with the builder and read through the real sysfs reader.
"""

from __future__ import annotations

from liken_devices.inventory import Context, Facts, build_inventory
from liken_devices.sysfs.umockdev import parse_recording
from tests.support.sysfs_builder import SysfsBuilder

from .support import OLD_KERNEL_USB, Scan, dev, names, paths


def test_outermost_bound_board_device_owns_its_subtree(b: SysfsBuilder, scan: Scan) -> None:
    """rules: hardware.node-owner. i8042 owns the keyboard and mouse behind it (serio0, serio1)."""
    i8042 = b.board("platform", "i8042", driver="i8042")
    for n, minor in (("serio0", 65), ("serio1", 66)):
        serio = b.device(i8042, n, "serio", driver="atkbd" if n == "serio0" else "psmouse")
        inp = b.device(serio, f"input{minor}", "input", subdir="input")
        b.node(inp, "input", f"event{minor - 64}", 13, minor, devname=f"input/event{minor - 64}")
    inv = scan()
    assert names(inv) == ["platform-i8042"]
    assert paths(inv, "platform-i8042") == ["/dev/input/event1", "/dev/input/event2"]
    assert dev(inv, "platform-i8042").attributes["subsystem"] == "input"
    assert "vendor" not in dev(inv, "platform-i8042").attributes  # board: no vendor


def test_acpi_power_button_is_published(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes: the ACPI power button is a board device owning a node."""
    root = b.board("acpi", "LNXSYSTM:00", parent="/devices")
    btn = b.board("acpi", "LNXPWRBN:00", driver="button", parent=root)
    inp = b.device(btn, "input0", "input", subdir="input")
    b.node(inp, "input", "event0", 13, 64, devname="input/event0")
    inv = scan()
    assert names(inv) == ["acpi-lnxpwrbn-00"]
    assert dev(inv, "acpi-lnxpwrbn-00").attributes["bus"] == "acpi"


def test_platform_device_inside_pci_is_not_a_board_device(b: SysfsBuilder, scan: Scan) -> None:
    """rules: hardware.considered. A board device's directory is not inside a PCI or USB device."""
    lpss = b.pci("0000:00:15.0", driver="intel-lpss", cls=0x118000)
    i2c = b.board("platform", "i2c_designware.0", driver="i2c_designware", parent=lpss)
    b.node(i2c, "i2c-dev", "i2c-0", 89, 0, subdir="i2c-0/i2c-dev")
    inv = scan()
    assert names(inv) == ["pci-0000-00-15-0"]
    assert not [o for o in inv.outcomes if o.address == "i2c_designware.0"]



# -- only bus devices are USB devices ------------------------------------------------------------


def old_kernel_usb_class_devices(b: SysfsBuilder) -> None:
    """A keyboard's HID interface with a hiddev node and a modem's cdc_wdm interface, as kernels
    whose ``usb`` class held them lay them out: ``.../1-1.3:1.2/usb/hiddev0`` (uevent MAJOR=180,
    DEVNAME=usb/hiddev0, no DEVTYPE; its subsystem link is class/usb), behind a hub ``1-1``."""
    root = b.usb_device("usb1", busnum=1, devnum=1, vendor="1d6b", product="0002", dev_class="09")
    b.usb_interface(root, "1.0", driver="hub", cls=9)
    hub = b.usb_device("1-1", parent=root, devnum=2, vendor="8087", product="0024", dev_class="09")
    b.usb_interface(hub, "1.0", driver="hub", cls=9)
    kbd = b.usb_device("1-1.3", parent=hub, devnum=3, vendor="046d", product="c31c")
    boot = b.usb_interface(kbd, "1.0", driver="usbhid", cls=3)
    b.node(b.device(boot, "0003:046D:C31C.0001", "hid"), "hidraw", "hidraw0", 251, 0,
           subdir="hidraw")
    extra = b.usb_interface(kbd, "1.2", driver="usbhid", cls=3)
    b.node(extra, "usb", "hiddev0", 180, 96, devname="usb/hiddev0", subdir="usb", is_class=True)
    modem = b.usb_device("1-2", parent=root, devnum=4, vendor="12d1", product="1506")
    wdm = b.usb_interface(modem, "1.3", driver="cdc_wdm", cls=0xFF)
    b.node(wdm, "usb", "cdc-wdm1", 180, 177, devname="cdc-wdm1", subdir="usb", is_class=True)


def test_a_usb_class_device_belongs_to_its_interface_and_is_never_a_usb_device(
        b: SysfsBuilder, scan: Scan) -> None:
    """rules: usb.bus-devices-only. ``hiddev0`` and ``cdc-wdm1`` in the ``usb`` class are the
    nodes of the interfaces above them, delivered by their claims with the usbfs node; nothing
    is published under their names."""
    old_kernel_usb_class_devices(b)
    inv = scan()
    assert names(inv) == ["usb-1-1-3-1-0", "usb-1-1-3-1-2", "usb-1-2-1-3"]
    assert paths(inv, "usb-1-1-3-1-2") == ["/dev/usb/hiddev0", "/dev/bus/usb/001/003"]
    assert paths(inv, "usb-1-2-1-3") == ["/dev/cdc-wdm1", "/dev/bus/usb/001/004"]
    # The kind of node is the one current kernels call it (their usbmisc class).
    assert dev(inv, "usb-1-2-1-3").attributes["subsystem"] == "usbmisc"
    assert not [o for o in inv.outcomes if o.address in ("hiddev0", "cdc-wdm1")]
    [wdm] = [o for o in inv.outcomes if o.address == "1-2:1.3"]
    assert wdm.reason is None and wdm.devices == ("usb-1-2-1-3",)


def test_a_usb_class_device_in_a_recording_belongs_to_its_interface() -> None:
    """rules: usb.bus-devices-only. Such a machine as umockdev-record writes it (SUBSYSTEM=usb
    on the class devices): the interfaces deliver them, no ``usb-hiddev0`` or ``usb-cdc-wdm1``."""
    inv = build_inventory(parse_recording(OLD_KERNEL_USB), Context(Facts(frozenset())))
    assert [d.name for d in inv.devices] == ["usb-1-1-1-1", "usb-1-2-1-3"]
    assert [n.path for n in inv.by_name()["usb-1-1-1-1"].nodes] == [
        "/dev/usb/hiddev0", "/dev/bus/usb/001/003"]
    assert [n.path for n in inv.by_name()["usb-1-2-1-3"].nodes] == [
        "/dev/cdc-wdm1", "/dev/bus/usb/001/004"]
    assert {o.address for o in inv.outcomes} == {"0000:00:1d.0", "usb1", "1-1:1.1", "1-2:1.3"}


def test_a_usb_device_is_named_only_by_a_bus_address(b: SysfsBuilder, scan: Scan) -> None:
    """rules: usb.bus-devices-only. A device of the usb subsystem whose name is not a bus
    address (``usbN``, ``B-P.P``, ``B-P:C.I``) is no USB device, whatever its DEVTYPE says."""
    usb = b.usb_device("1-4", devnum=5)
    iface = b.usb_interface(usb, driver="usbhid", cls=3)
    b.device(iface, "odd0", "usb", {"DEVTYPE": "usb_device", "MAJOR": "180", "MINOR": "97",
                                    "DEVNAME": "usb/odd0"}, attrs={"dev": "180:97"},
             subdir="usb", is_class=True)
    (b.root / "dev" / "char" / "180:97").symlink_to(
        "../../devices/pci0000:00/0000:00:14.0/1-4/1-4:1.0/usb/odd0")
    inv = scan()
    assert names(inv) == ["usb-1-4-1-0"]
    assert paths(inv, "usb-1-4-1-0") == ["/dev/usb/odd0", "/dev/bus/usb/001/005"]
