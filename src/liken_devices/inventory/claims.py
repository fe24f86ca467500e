"""What the claims prepared on this node change in a walk.

The node's agent and its kubelet plugin tell every walk which devices the prepared claims hold
(:class:`~.model.Claimed`; offline commands know none). Two rules read them:

* rules: usb.claimed-keeps-shape. A claimed USB device keeps its shape until its claim ends. A
  libusb program leaving the device (it exits, crashes or is restarted inside the running pod, so
  the kernel shows an interface with no driver) changes nothing: the device does not publish whole,
  none of its interfaces returns to the slice, and the claim keeps the device's current usbfs
  node. A whole-device claim whose program holds an interface (``usbfs``) is in use, not absent.
  :mod:`.usb` asks here which interfaces a claim holds and records what it keeps.
* rules: limits.cap-keeps-claimed. Past 128 devices (rules: limits.cap), the
  published ones are first every device a claim holds, then the rest in natural order of their
  names, so a hotplug never pushes a device out from under a running pod.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .hardware import Hardware
from .limits import MAX_DEVICES
from .model import Claimed, PublishedDevice
from .names import Names

# The names a USB interface publishes as: bare, or one device per kind of node
# (rules: names.suffix): "-display", and "-" plus the subsystem for the GPU's and the serial line's
# devices.
INTERFACE_SUFFIXES = ("", "-display", "-i2c-dev", "-drm-dp-aux-dev", "-cec", "-input")

_DIGIT_RUNS = re.compile(r"(\d+)")


def claimed_interfaces(ifaces: Sequence[Hardware], claimed: Claimed,
                       names: Names) -> dict[str, list[str]]:
    """The interfaces (by sysfs path) a claim holds, with the names it holds them by."""
    if not claimed:
        return {}
    out: dict[str, list[str]] = {}
    for i in ifaces:
        held = [n for n in (names.of(i, s) for s in INTERFACE_SUFFIXES) if n in claimed]
        if held:
            out[i.path] = held
    return out


def holds_whole(usb: Hardware, claimed: Claimed, names: Names) -> bool:
    """Whether a claim holds the USB device whole (rules: usb.whole-device)."""
    return bool(claimed) and names.of(usb) in claimed


def natural_key(name: str) -> tuple[tuple[int | str, ...], str]:
    """Natural order of names: digit runs compare as numbers (``usb-3-9`` before ``usb-3-100``).

    ``re.split`` with a group alternates text and digit runs, so the same position of two keys
    holds the same type; the name itself breaks ties (``01`` and ``1``).
    """
    parts = _DIGIT_RUNS.split(name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


def cap(devices: Sequence[PublishedDevice], claimed: Claimed) -> tuple[
        list[PublishedDevice], list[PublishedDevice]]:
    """The devices kept (in their given order) and those dropped, in the order they were dropped.

    First every device a claim holds, then the rest in natural order of their names, up to 128.
    """
    if len(devices) <= MAX_DEVICES:
        return list(devices), []
    ranked = sorted(devices, key=lambda d: (d.name not in claimed, natural_key(d.name)))
    keep = {d.name for d in ranked[:MAX_DEVICES]}
    return [d for d in devices if d.name in keep], ranked[MAX_DEVICES:]
