"""What the tests of the inventory's rule modules share: reading an inventory's answer, and the
small machines several of them build (a HID interface, a Bluetooth radio, a serial-line adapter).

The fixtures ``b`` (a :class:`~tests.support.sysfs_builder.SysfsBuilder` in a temporary
directory) and ``scan`` (the policy over what it built) are in ``conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from liken_devices.inventory import Inventory, SerioEntry
from liken_devices.inventory.model import PublishedDevice
from tests.support.sysfs_builder import Dev, SysfsBuilder

Scan = Callable[..., Inventory]


def names(inv: Inventory) -> list[str]:
    return [d.name for d in inv.devices]


def dev(inv: Inventory, name: str) -> PublishedDevice:
    return inv.by_name()[name]


def reason(inv: Inventory, address: str) -> str | None:
    found = [o for o in inv.outcomes if o.address == address]
    assert found, f"{address} was not considered"
    return found[0].reason


def paths(inv: Inventory, name: str) -> list[str]:
    return [n.path for n in dev(inv, name).nodes]


def hid_interface(b: SysfsBuilder, usb: Dev, number: str = "1.0", minor: int = 0) -> Dev:
    iface = b.usb_interface(usb, number, driver="usbhid", cls=3)
    hid = b.device(iface, f"0003:1234:5678.000{minor}", "hid")
    b.node(hid, "hidraw", f"hidraw{minor}", 240, minor, subdir="hidraw")
    return iface


def bluetooth(b: SysfsBuilder) -> Dev:
    usb = b.usb_device("1-8", devnum=3, vendor="8087", product="0026")
    radio = b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
    b.usb_interface(usb, "1.1", driver="btusb", cls=0xE0)
    hci = b.device(radio, "hci0", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth")
    # A connected game controller's HID device sits under the adapter's interface.
    hid = b.device(hci, "hci0:256", "bluetooth")
    pad = b.device(hid, "0005:054C:09CC.0007", "hid")
    b.node(pad, "hidraw", "hidraw3", 240, 3, subdir="hidraw")
    return usb


PULSE8 = SerioEntry("pulse8-cec", "2548", "1002")


def cec_adapter(b: SysfsBuilder, *, attached: bool, tty: str = "ttyACM0") -> Dev:
    usb = b.usb_device("1-5", devnum=6, vendor="2548", product="1002", serial="P8-1")
    acm = b.usb_interface(usb, "1.0", driver="cdc_acm", cls=2)
    b.usb_interface(usb, "1.1", driver="cdc_acm", cls=0x0A)
    hid_interface(b, usb, "1.2", 4)
    line = b.node(acm, "tty", tty, 166, int(tty[-1]), subdir="tty")
    if attached:
        serio = b.device(line, "serio2", "serio", driver="pulse8-cec")
        b.node(serio, "cec", "cec0", 242, 0, subdir="cec")
        rc = b.device(serio, "rc0", "rc", subdir="rc")
        inp = b.device(rc, "input30", "input")
        b.node(inp, "input", "event30", 13, 94, devname="input/event30")
    return usb
