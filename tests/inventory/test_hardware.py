"""Which hardware is considered and which of it owns each node (inventory/hardware.py): board
devices outside every PCI or USB device, the outermost bound one owning its subtree.

rules: hardware.considered, hardware.node-owner

Trees are built on disk with the builder and read through the real sysfs reader.
"""

from __future__ import annotations

from tests.support.sysfs_builder import SysfsBuilder

from .support import Scan, dev, names, paths


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

