"""The 128 cap keeps what is claimed (rules: limits.cap, limits.cap-keeps-claimed).

When more than 128 devices qualify, the published ones are first every device a claim prepared
on this node holds, then the rest in natural order of their names (digit runs compare as
numbers), up to 128; a hotplug never pushes a claimed device out. Machines are generated in
memory (a sysfs snapshot of USB HID interfaces behind hub chains, and PCI serial cards).
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.inventory import MAX_DEVICES, Inventory, build_inventory
from liken_devices.inventory.model import NO_CLAIMS, Claimed, Reason
from liken_devices.sysfs.model import DevNode, Snapshot, SysDevice

XHCI = "/devices/pci0000:00/0000:00:14.0"


def natural(name: str) -> list[int | str]:
    """Digit runs as numbers: the test's own statement of natural order."""
    return [int(t) if t.isdigit() else t for t in re.findall(r"\d+|\D+", name)]


def machine(usb: list[str], serial_cards: int = 0) -> Snapshot:
    """A HID interface (hidraw) on each USB address (``3-100``, ``1-2.4``), and PCI serial
    cards with one tty each."""
    devs: dict[str, SysDevice] = {}
    for n, address in enumerate(usb):
        bus = address.split("-")[0]
        dev = f"{XHCI}/usb{bus}/{address}"
        devs[dev] = SysDevice(dev, "usb", "usb", {"DEVTYPE": "usb_device"},
                              {"idVendor": b"1234", "idProduct": b"5678", "bDeviceClass": b"00"},
                              DevNode(f"bus/usb/{int(bus):03d}/{n % 127 + 1:03d}", "c", 189, n))
        iface = f"{dev}/{address}:1.0"
        devs[iface] = SysDevice(iface, "usb", "usbhid", {"DEVTYPE": "usb_interface",
                                                         "INTERFACE": "3/0/0"})
        raw = f"{iface}/hidraw/hidraw{n}"
        devs[raw] = SysDevice(raw, "hidraw", None, {}, node=DevNode(f"hidraw{n}", "c", 242, n))
    for i in range(serial_cards):
        pci = f"/devices/pci0000:00/0000:{i // 32 + 1:02x}:{i % 32:02x}.0"
        devs[pci] = SysDevice(pci, "pci", "exar_serial", {"PCI_CLASS": "70002",
                                                          "PCI_ID": "13A8:0352"})
        tty = f"{pci}/tty/ttyS{i + 4}"
        devs[tty] = SysDevice(tty, "tty", None, {}, node=DevNode(f"ttyS{i + 4}", "c", 4, 68 + i))
    return Snapshot(devs)


def names(inv: Inventory) -> list[str]:
    return [d.name for d in inv.devices]


def test_usb_3_9_is_kept_before_usb_3_100() -> None:
    ports = [9, *range(100, 228)]  # 129 devices; by plain text, usb-3-9-1-0 sorts last
    inv = build_inventory(machine([f"3-{p}" for p in ports]))
    assert len(inv.devices) == MAX_DEVICES
    assert "usb-3-9-1-0" in names(inv)
    assert "usb-3-100-1-0" in names(inv)
    assert inv.overflow == ("usb-3-227-1-0",)
    (o,) = [o for o in inv.outcomes if o.address == "3-227:1.0"]
    assert o.reason == Reason.OVER_CAP


def test_a_hotplug_never_pushes_a_claimed_device_out() -> None:
    usb = [f"3-{p}" for p in range(100, 228)]  # exactly 128
    claimed = Claimed(frozenset({"usb-3-227-1-0"}))  # the last in natural order, in a pod
    assert "usb-3-227-1-0" in names(build_inventory(machine(usb), claimed=claimed))
    inv = build_inventory(machine([*usb, "3-5"]), claimed=claimed)  # one more is plugged in
    assert "usb-3-227-1-0" in names(inv)
    assert "usb-3-5-1-0" in names(inv)
    assert inv.overflow == ("usb-3-226-1-0",)


# -- properties -------------------------------------------------------------------------------

addresses = st.builds(
    lambda bus, chain: f"{bus}-{'.'.join(str(p) for p in chain)}",
    st.integers(1, 12), st.lists(st.integers(1, 150), min_size=1, max_size=3))


class Crowded:
    """A machine with more than 128 devices, and the names it would publish without a cap."""

    def __init__(self, usb: list[str], cards: int) -> None:
        self.usb, self.cards = usb, cards
        self.snap = machine(usb, cards)
        inv = build_inventory(self.snap)
        self.every = [*names(inv), *inv.overflow]

    def __repr__(self) -> str:  # what hypothesis prints for a failing example
        return f"Crowded(usb={self.usb!r}, cards={self.cards})"


@st.composite
def crowded(draw: st.DrawFn) -> Crowded:
    usb = draw(st.lists(addresses, min_size=100, max_size=170, unique=True))
    cards = draw(st.integers(0, 40))
    return Crowded(usb, max(cards, MAX_DEVICES + 1 - len(usb)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded(), st.data())
def test_claimed_devices_are_kept_then_natural_order(node: Crowded,
                                                     data: st.DataObject) -> None:
    snap, every = node.snap, node.every
    assert len(every) > MAX_DEVICES
    claimed_names = data.draw(st.sets(st.sampled_from(every), max_size=MAX_DEVICES))
    # A claim may name a device this node no longer has: it changes nothing.
    claimed = Claimed(frozenset({*claimed_names, "usb-99-1-1-0-gone"}))
    inv = build_inventory(snap, claimed=claimed)
    kept = set(names(inv))
    assert len(kept) == MAX_DEVICES
    assert claimed_names <= kept
    assert kept | set(inv.overflow) == set(every)
    assert not kept & set(inv.overflow)
    rest_kept = sorted((n for n in kept if n not in claimed_names), key=natural)
    dropped = sorted(inv.overflow, key=natural)
    assert natural(rest_kept[-1]) < natural(dropped[0]) if rest_kept else True
    assert list(inv.overflow) == dropped  # dropped in natural order
    assert names(inv) == sorted(kept)  # the slice lists them by name, as before


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(addresses, min_size=100, max_size=128, unique=True),
       st.lists(addresses, min_size=30, max_size=60, unique=True), st.data())
def test_no_hotplug_pushes_a_claimed_device_out(before: list[str], plugged: list[str],
                                                data: st.DataObject) -> None:
    inv = build_inventory(machine(before))
    claimed = Claimed(frozenset(data.draw(st.sets(st.sampled_from(names(inv)), min_size=1))))
    after = build_inventory(machine([*before, *(a for a in plugged if a not in before)]),
                            claimed=claimed)
    assert claimed.names <= set(names(after))
    assert len(after.devices) <= MAX_DEVICES


def test_without_claims_the_order_is_natural_alone() -> None:
    inv = build_inventory(machine([f"1-{p}" for p in range(1, 131)]), claimed=NO_CLAIMS)
    assert inv.overflow == ("usb-1-129-1-0", "usb-1-130-1-0")
