"""Giving USB interfaces back to the kernel when a claim ends.

rules: usb.rebind. A libusb program cannot share an interface with a kernel driver, so it
detaches the driver while it runs, and the device leaves the slice; when the pod stops and its
claim ends, the node binds a kernel driver to the interface again. The kernel binds a driver to
a driverless device when its name is written to ``/sys/bus/usb/drivers_probe`` (drivers_probe
only attaches a device that has no driver, so an interface still bound, to its own driver or to
usbfs under another live claim, is left as it is).

Which interfaces: those of the USB devices whose usbfs node (``/dev/bus/usb/BBB/DDD``) a claim
delivers, found at prepare time by the device's sysfs path or, failing that, by the usbfs
numbers (``busnum``/``devnum`` of ``/sys/bus/usb/devices/*``).
"""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

from ..sysfs.model import DevNode

log = logging.getLogger(__name__)

# A USB device (not a root hub, not an interface): "1-2", "3-1.4.2".
_USB_DEVICE = re.compile(r"[0-9]+-[0-9]+(\.[0-9]+)*")  # fullmatch; ASCII digits only


def usbfs_numbers(nodes: Iterable[DevNode]) -> list[tuple[int, int]]:
    """(busnum, devnum) of every usbfs node in ``nodes`` (``bus/usb/001/004``)."""
    out = []
    for n in nodes:
        parts = n.name.split("/")
        if len(parts) == 4 and parts[:2] == ["bus", "usb"]:
            try:
                out.append((int(parts[2]), int(parts[3])))
            except ValueError:
                continue
    return out


def _interfaces_of(usbdev: Path) -> list[str]:
    name = usbdev.name
    pat = re.compile(re.escape(name) + r":[0-9]+\.[0-9]+")
    try:
        return sorted(e for e in os.listdir(usbdev) if pat.fullmatch(e))
    except OSError:
        return []


def _usb_device_dir(sysfs: Path, source: str) -> Path | None:
    """The USB device directory at or above a sysfs device path."""
    path = source
    while path.startswith("/devices/"):
        if _USB_DEVICE.fullmatch(path.rsplit("/", 1)[-1]):
            return sysfs / path.lstrip("/")
        path = path.rsplit("/", 1)[0]
    return None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def interfaces_for(sysfs: Path | None, source: str | None, nodes: Iterable[DevNode]) -> list[str]:
    """The interfaces of the USB device behind a delivery that includes a usbfs node."""
    numbers = usbfs_numbers(nodes)
    if not numbers or sysfs is None:
        return []
    if source:
        d = _usb_device_dir(sysfs, source)
        if d is not None and d.is_dir():
            return _interfaces_of(d)
    found: list[str] = []
    devices = sysfs / "bus" / "usb" / "devices"
    try:
        entries = sorted(os.listdir(devices))
    except OSError:
        return []
    for e in entries:
        if not _USB_DEVICE.fullmatch(e):
            continue
        d = devices / e
        if (_read_int(d / "busnum"), _read_int(d / "devnum")) in numbers:
            found.extend(_interfaces_of(d.resolve()))
    return sorted(set(found))


def current_driver(sysfs: Path, interface: str) -> str | None:
    try:
        return os.path.basename(os.readlink(sysfs / "bus" / "usb" / "devices" / interface
                                            / "driver"))
    except OSError:
        return None


def reprobe(sysfs: Path | None, interfaces: Iterable[str]) -> list[str]:
    """Ask the kernel to bind a driver to each interface left with usbfs or no driver.

    Returns the interfaces written to ``drivers_probe``. An interface that is gone (unplugged)
    is skipped; a write error is logged and does not fail the unprepare: the claim is over either
    way, and the interface comes back at the next plug.
    """
    done: list[str] = []
    if sysfs is None:
        return done
    probe = sysfs / "bus" / "usb" / "drivers_probe"
    for intf in interfaces:
        if not (sysfs / "bus" / "usb" / "devices" / intf).exists():
            continue
        if current_driver(sysfs, intf) not in (None, "usbfs"):
            continue
        try:
            with open(probe, "w") as f:
                f.write(intf)
            done.append(intf)
        except OSError as e:
            if e.errno != errno.ENODEV:
                log.warning("drivers_probe %s: %s", intf, e)
    return done
