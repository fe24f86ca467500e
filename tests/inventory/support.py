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


# What umockdev-record writes of such a machine (an older kernel's udev database: the class
# devices say SUBSYSTEM=usb and have no DEVTYPE).
OLD_KERNEL_USB = """P: /devices/pci0000:00/0000:00:1d.0
E: DRIVER=ehci_hcd
E: PCI_CLASS=C0320
E: PCI_ID=8086:3A3A
E: SUBSYSTEM=pci

P: /devices/pci0000:00/0000:00:1d.0/usb1
N: bus/usb/001/001
E: BUSNUM=001
E: DEVNUM=001
E: DEVTYPE=usb_device
E: DRIVER=usb
E: MAJOR=189
E: MINOR=0
E: PRODUCT=1d6b/2/206
E: TYPE=9/0/0
E: SUBSYSTEM=usb

P: /devices/pci0000:00/0000:00:1d.0/usb1/1-1
N: bus/usb/001/003
E: BUSNUM=001
E: DEVNUM=003
E: DEVTYPE=usb_device
E: DRIVER=usb
E: MAJOR=189
E: MINOR=2
E: PRODUCT=46d/c31c/6400
E: TYPE=0/0/0
E: SUBSYSTEM=usb

P: /devices/pci0000:00/0000:00:1d.0/usb1/1-1/1-1:1.1
E: DEVTYPE=usb_interface
E: DRIVER=usbhid
E: INTERFACE=3/0/0
E: MODALIAS=usb:v046DpC31Cd6400dc00dsc00dp00ic03isc00ip00
E: SUBSYSTEM=usb

P: /devices/pci0000:00/0000:00:1d.0/usb1/1-1/1-1:1.1/usb/hiddev0
N: usb/hiddev0
E: DEVNAME=/dev/usb/hiddev0
E: MAJOR=180
E: MINOR=96
E: SUBSYSTEM=usb

P: /devices/pci0000:00/0000:00:1d.0/usb1/1-2
N: bus/usb/001/004
E: BUSNUM=001
E: DEVNUM=004
E: DEVTYPE=usb_device
E: DRIVER=usb
E: MAJOR=189
E: MINOR=3
E: PRODUCT=12d1/1506/0
E: TYPE=0/0/0
E: SUBSYSTEM=usb

P: /devices/pci0000:00/0000:00:1d.0/usb1/1-2/1-2:1.3
E: DEVTYPE=usb_interface
E: DRIVER=cdc_wdm
E: INTERFACE=255/1/9
E: SUBSYSTEM=usb

P: /devices/pci0000:00/0000:00:1d.0/usb1/1-2/1-2:1.3/usb/cdc-wdm1
N: cdc-wdm1
E: DEVNAME=/dev/cdc-wdm1
E: MAJOR=180
E: MINOR=177
E: SUBSYSTEM=usb
"""
