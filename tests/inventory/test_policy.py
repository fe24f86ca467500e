"""The walk over all the hardware (inventory/policy.py): bus structure is never published, and
past 128 devices the rest is dropped and counted.

rules: hardware.bus-structure, limits.cap

Trees are built on disk with the builder and read through the real sysfs reader.
"""

from __future__ import annotations

from liken_devices.inventory.model import Reason
from tests.support.sysfs_builder import SysfsBuilder

from .support import Scan, names, reason


def test_bus_structure_is_not_listed(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes: hubs, PCIe ports and root hubs are structure, not peripherals."""
    b.pci("0000:00:00.0", cls=0x060000)
    b.pci("0000:00:1c.0", driver="pcieport", cls=0x060400)
    root = b.usb_device("usb1", devnum=1, dev_class="09", vendor="1d6b", product="0002")
    b.usb_interface(root, "1.0", driver="hub", cls=9)
    hub = b.usb_device("1-1", parent=root, devnum=2, dev_class="09")
    b.usb_interface(hub, "1.0", driver="hub", cls=9)
    inv = scan()
    assert names(inv) == []
    for address in ("0000:00:00.0", "0000:00:1c.0", "usb1", "1-1", "1-1:1.0"):
        assert reason(inv, address) == Reason.BUS_STRUCTURE


def test_more_than_128_devices_drop_the_overflow(b: SysfsBuilder, scan: Scan) -> None:
    """Limits: at most 128 devices; the overflow is dropped and counted."""
    for i in range(130):
        d = b.board("platform", f"gpio-keys.{i:03d}", driver="gpio-keys")
        b.node(d, "misc", f"k{i}", 10, 100 + i, subdir="misc")
    inv = scan()
    assert len(inv.devices) == 128
    assert inv.total == 130
    assert inv.overflow == ("platform-gpio-keys-128", "platform-gpio-keys-129")
    assert reason(inv, "gpio-keys.129") == Reason.OVER_CAP

