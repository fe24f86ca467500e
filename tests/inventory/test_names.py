"""Device names (inventory/names.py): bus and address lowercased with dashes, cut to 63
characters without touching the suffix, collisions told apart by a hash, the port and not the
unit.

rules: names.form, names.cut, names.collision, names.slot-not-unit

Trees are built on disk with the builder and read through the real sysfs reader.
"""

from __future__ import annotations

from typing import NamedTuple

from liken_devices.inventory.names import Names, device_name
from tests.support.sysfs_builder import SysfsBuilder

from .support import Scan, dev, hid_interface, names, paths


def test_names_are_bus_and_address_lowercased_with_dashes() -> None:
    """Device names: pci-0000-00-02-0, usb-2-1-1-0, platform-msft0101-00, pnp-00-04."""
    assert device_name("pci", "0000:00:02.0") == "pci-0000-00-02-0"
    assert device_name("usb", "1-2.1:1.0") == "usb-1-2-1-1-0"
    assert device_name("pnp", "00:04") == "pnp-00-04"
    assert device_name("usb", "1-2") == "usb-1-2"


def test_names_stop_at_63_characters_with_suffix_kept() -> None:
    """Device names: a name stops at 63 characters, the limit of a DNS label."""
    address = "device-with-a-very-long-firmware-name-that-goes-on-and-on:00"
    name = device_name("platform", address, "-drm-dp-aux-dev")
    assert len(name) <= 63 and name.endswith("-drm-dp-aux-dev")
    assert not name.removesuffix("-drm-dp-aux-dev").endswith("-")


def test_colliding_cut_names_are_made_unique(b: SysfsBuilder, scan: Scan) -> None:
    """rules: names.collision. Two names equal after the cut get a hash of the full address."""
    long = "a-board-device-whose-firmware-name-is-very-long-indeed-x"
    for n, minor in (("1", 70), ("2", 71)):
        d = b.board("platform", f"{long}{n}.{n}", driver="leds")
        b.node(d, "misc", f"m{minor}", 10, minor, subdir="misc")
    inv = scan()
    got = names(inv)
    assert len(got) == 2 and len(set(got)) == 2
    assert all(len(n) <= 63 for n in got)


def test_name_follows_the_port_not_the_unit(b: SysfsBuilder, scan: Scan) -> None:
    """Device names: an identical dongle in the same port keeps the name; serial tells units."""
    usb = b.usb_device("1-2", serial="UNIT-A")
    hid_interface(b, usb)
    first = scan()
    b.remove(usb)
    usb = b.usb_device("1-2", devnum=7, serial="UNIT-B")
    hid_interface(b, usb)
    second = scan()
    assert names(first) == names(second) == ["usb-1-2-1-0"]
    assert dev(first, "usb-1-2-1-0").attributes["serial"] == "UNIT-A"
    assert dev(second, "usb-1-2-1-0").attributes["serial"] == "UNIT-B"
    assert paths(second, "usb-1-2-1-0")[-1] == "/dev/bus/usb/001/007"



class _Hw(NamedTuple):
    bus: str
    address: str
    path: str


class _Wanted(NamedTuple):
    hw: _Hw
    suffix: str


def test_names_are_made_in_path_order_whatever_order_they_are_handed_over() -> None:
    """rules: names.collision. The later in sysfs path order takes the hashed form, and each name
    comes back in the place its candidate was handed over."""
    long = "a-board-device-whose-firmware-name-is-very-long-indeed-x"
    early = _Hw("platform", f"{long}1.1", f"/devices/platform/{long}1.1")
    late = _Hw("platform", f"{long}2.2", f"/devices/platform/{long}2.2")
    made = Names().make([_Wanted(late, ""), _Wanted(early, "")])
    assert made[1] == Names().of(early) == device_name("platform", early.address)
    assert made[0] == device_name("platform", late.address, hashed=True) != made[1]


def test_an_outcome_names_its_devices_as_the_slice_does(b: SysfsBuilder, scan: Scan) -> None:
    """rules: names.collision. ``explain`` lists a device by the name it is published as, the
    hashed one too."""
    long = "a-board-device-whose-firmware-name-is-very-long-indeed-x"
    for n, minor in (("1", 70), ("2", 71)):
        d = b.board("platform", f"{long}{n}.{n}", driver="leds")
        b.node(d, "misc", f"m{minor}", 10, minor, subdir="misc")
    inv = scan()
    listed = [n for o in inv.outcomes for n in o.devices]
    assert sorted(listed) == names(inv)
    assert device_name("platform", f"{long}2.2", hashed=True) in listed
