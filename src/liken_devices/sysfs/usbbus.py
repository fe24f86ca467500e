"""Which devices of the ``usb`` subsystem are USB bus devices (rules: usb.bus-devices-only).

The USB core names its bus devices by address: a root hub ``usbN``, a device ``B-P`` with its
port path (``1-1.3``), an interface ``B-P:C.I`` (``1-1.3:1.2``; a root hub's is ``1-0:1.0``),
and its uevent says which with DEVTYPE (``usb_device``, ``usb_interface``). Older kernels also
had a ``usb`` *class*, where the class devices of drivers that register a minor with the USB core
(``hiddev*``, ``cdc-wdm*``, ``lp*``, ...) live under their interface
(``.../1-1.3:1.2/usb/hiddev0``) and say SUBSYSTEM=usb too; current kernels call that class
``usbmisc``. Such a device is a node of the interface above it, never a USB device: only a name
that is a bus address makes one, and a DEVTYPE that contradicts the name unmakes it.
"""

from __future__ import annotations

import re
from typing import Literal

UsbRole = Literal["usb_device", "usb_interface"]

_DEVICE = re.compile(r"usb[0-9]+|[0-9]+-[0-9]+(\.[0-9]+)*")
_INTERFACE = re.compile(r"[0-9]+-[0-9]+(\.[0-9]+)*:[0-9]+\.[0-9]+")
# The name current kernels give the class that older ones called ``usb``.
LEGACY_CLASS = "usbmisc"


def usb_role(name: str, devtype: str | None) -> UsbRole | None:
    """``usb_device`` or ``usb_interface`` for a bus device of the ``usb`` subsystem named
    ``name`` (the last component of its path), None for a class device of the legacy class."""
    if _DEVICE.fullmatch(name):
        role: UsbRole = "usb_device"
    elif _INTERFACE.fullmatch(name):
        role = "usb_interface"
    else:
        return None
    return role if devtype in (None, role) else None
