"""Device names (rules: names.form, names.suffix, names.cut, names.collision, names.slot-not-unit).

A name is the bus and the address, lowercased, punctuation as dashes, cut to a DNS label; an
extra device of the same hardware carries a suffix. Two names that collide after the cut are
told apart by a hash of the later one's full address.

:class:`Names` is the one place a walk makes them: the rules hand over candidates (a piece of
hardware and a suffix), never a name, and the lookups of what a program or a claim holds ask it
for the name they hold a device by.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Protocol

from .limits import NAME_MAX

_NON_NAME = re.compile(r"[^a-z0-9]+")


def name_part(address: str) -> str:
    """rules: names.form. Lowercase, every run outside [a-z0-9] becomes one ``-``, trimmed."""
    return _NON_NAME.sub("-", address.lower()).strip("-")


@lru_cache(maxsize=8192)
def device_name(bus: str, address: str, suffix: str = "", *, hashed: bool = False) -> str:
    """``<bus>-<address><suffix>`` cut to 63 characters, the base cut first (rules: names.cut)."""
    base = f"{bus}-{name_part(address)}"
    room = NAME_MAX - len(suffix)
    base = base[:room].rstrip("-")
    if hashed:
        # deferred: hashlib loads OpenSSL, 3 ms of every `scan` for a name that collides only
        # on a rare machine (tests/test_layers.py).
        import hashlib

        digest = hashlib.sha256(address.encode()).hexdigest()[:6]
        base = (base[:-7] if len(base) > 7 else "") + "-" + digest
        base = base[:room].lstrip("-")
    return base + suffix


def unique_names(wanted: Iterable[tuple[str, str, str]]) -> list[str]:
    """The names of ``(bus, address, suffix)`` in the order given (rules: names.collision).

    The caller orders by sysfs path: a name already taken after the cut goes to the earlier
    one, and the later one takes the hashed form.
    """
    seen: set[str] = set()
    out: list[str] = []
    for bus, address, suffix in wanted:
        name = device_name(bus, address, suffix)
        if name in seen:
            name = device_name(bus, address, suffix, hashed=True)
        seen.add(name)
        out.append(name)
    return out


class Place(Protocol):
    """Where a device sits: a piece of hardware (:class:`~.hardware.Hardware`)."""

    @property
    def bus(self) -> str: ...

    @property
    def address(self) -> str: ...

    @property
    def path(self) -> str: ...


class Wanted(Protocol):
    """A device a rule hands over to be named: its hardware and its suffix (rules: names.suffix).
    """

    @property
    def hw(self) -> Place: ...

    @property
    def suffix(self) -> str: ...


class Names:
    """The names of one walk's devices.

    :meth:`make` names the candidates of the slice at the end of the walk, all at once, unique
    in the slice (rules: names.collision). While the walk runs, :meth:`of` answers for a device
    the walk does not publish, or not yet: the name a libusb program's or a claim's device is
    held by (``Inventory.held``), and the names a prepared claim may hold a device by.
    """

    __slots__ = ()

    def of(self, hw: Place, suffix: str = "") -> str:
        """The name of the device ``hw`` publishes with ``suffix`` when no device earlier in
        path order takes it first (only :meth:`make`, over the whole slice, knows that; rules:
        names.form, names.cut): the name a claim holds a device by, and ``Inventory.held``'s key.
        """
        return device_name(hw.bus, hw.address, suffix)

    def of_usb(self, path: str) -> str:
        """The name of the USB device or interface at sysfs ``path`` (a Bluetooth adapter's
        holder, known by the path of its ``hci``)."""
        return device_name("usb", path.rsplit("/", 1)[-1])

    def make(self, wanted: Sequence[Wanted]) -> list[str]:
        """The names of the slice's candidates, in the order given: unique after the cut, the
        earlier in sysfs path order keeping the plain form (rules: names.collision)."""
        order = sorted(range(len(wanted)), key=lambda i: (wanted[i].hw.path, wanted[i].suffix))
        made = unique_names((wanted[i].hw.bus, wanted[i].hw.address, wanted[i].suffix)
                            for i in order)
        out = [""] * len(wanted)
        for i, name in zip(order, made, strict=True):
            out[i] = name
        return out
