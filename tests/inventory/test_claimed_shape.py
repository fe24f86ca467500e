"""A claimed USB device keeps its shape until its claim ends (rules: usb.claimed-keeps-shape).

The policy is told which devices the claims prepared on this node hold (``claimed``); while such
a claim holds an interface or the whole device, a libusb program leaving it changes nothing in
the slice, and the claim resolves to the device's current usbfs node. Offline walks know no
claims, and publish what the kernel shows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.inventory import Context, Inventory, MachineSpec, SerioEntry, build_inventory
from liken_devices.inventory.attributes import usb_ids
from liken_devices.inventory.model import NO_CLAIMS, Claimed, Reason
from liken_devices.inventory.names import device_name
from liken_devices.sysfs.model import DevNode, Snapshot, SysDevice
from liken_devices.sysfs.reader import read_sysfs
from tests.support.sysfs_builder import Dev, SysfsBuilder

from .test_properties import check_invariants, machines

UPS = "usb-1-2-1-0"


def usbfs(devnum: int) -> DevNode:
    return DevNode(f"bus/usb/001/{devnum:03d}", "c", 189, devnum - 1)


def claims(*names: str) -> Claimed:
    return Claimed(frozenset(names))


class Tree:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.b = SysfsBuilder(root)

    def walk(self, claimed: Claimed = NO_CLAIMS, ctx: Context | None = None) -> Inventory:
        return build_inventory(read_sysfs(self.root), ctx, claimed=claimed)


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path / "sys")


def ups(tree: Tree, devnum: int = 4, *, driver: str | None = "usbhid") -> tuple[Dev, Dev]:
    dev = tree.b.usb_device("1-2", devnum=devnum)
    iface = tree.b.usb_interface(dev, "1.0", driver=driver, cls=3)
    if driver == "usbhid":
        tree.b.node(iface, "hidraw", "hidraw0", 242, 0, subdir="hidraw")
    return dev, iface


def reason(inv: Inventory, address: str) -> str | None:
    (o,) = [o for o in inv.outcomes if o.address == address]
    return o.reason


def test_a_claimed_interface_its_program_left_does_not_publish_its_device_whole(
        tree: Tree) -> None:
    ups(tree, driver=None)  # the program exited: no driver on any interface
    # Offline (no claims), the kernel's view: the device publishes whole for libusb.
    assert [d.name for d in tree.walk().devices] == ["usb-1-2"]
    inv = tree.walk(claims(UPS))
    assert [d.name for d in inv.devices] == []
    assert inv.lookup(UPS) == (usbfs(4),)
    assert inv.lookup("usb-1-2") is None
    assert reason(inv, "1-2:1.0") == Reason.HELD_BY_CLAIM
    assert inv.unclaimed == ()  # in use, not hardware waiting for a module


def test_its_claim_keeps_the_current_usbfs_node(tree: Tree) -> None:
    dev, iface = ups(tree, driver=None)
    assert tree.walk(claims(UPS)).lookup(UPS) == (usbfs(4),)
    # Re-enumerated (a reset, a replug in the same port): the kernel gives a new number.
    tree.b.remove(iface)
    tree.b.remove(dev)
    ups(tree, devnum=9, driver=None)
    assert tree.walk(claims(UPS)).lookup(UPS) == (usbfs(9),)


def test_while_its_program_holds_it_the_claim_keeps_the_usbfs_node(tree: Tree) -> None:
    ups(tree, driver="usbfs")
    for claimed in (NO_CLAIMS, claims(UPS)):
        inv = tree.walk(claimed)
        assert [d.name for d in inv.devices] == []
        assert inv.lookup(UPS) == (usbfs(4),)


def test_none_of_its_interfaces_returns_and_the_driven_ones_stay(tree: Tree) -> None:
    dev = tree.b.usb_device("1-2", devnum=4)
    tree.b.usb_interface(dev, "1.0", driver=None, cls=3)  # the claimed one, left by its program
    audio = tree.b.usb_interface(dev, "1.1", driver="snd-usb-audio", cls=1)
    card = tree.b.device(audio, "card1", "sound", subdir="sound")
    tree.b.node(card, "sound", "pcmC1D0p", 116, 40, devname="snd/pcmC1D0p")
    tree.b.usb_interface(dev, "1.2", driver=None, cls=0xFF)
    inv = tree.walk(claims(UPS))
    assert [d.name for d in inv.devices] == ["usb-1-2-1-1"]
    assert inv.lookup(UPS) == (usbfs(4),)
    assert [u.address for u in inv.unclaimed] == ["1-2:1.2"]  # as before the program ran


def test_a_whole_device_claim_whose_program_holds_an_interface_is_in_use_not_absent(
        tree: Tree) -> None:
    dev = tree.b.usb_device("1-3", devnum=5)
    iface = tree.b.usb_interface(dev, "1.0", driver=None, cls=0x0B)
    assert [d.name for d in tree.walk(claims("usb-1-3")).devices] == ["usb-1-3"]
    tree.b.set_driver(iface, "usb", "usbfs")
    offline = tree.walk()
    assert offline.lookup("usb-1-3") is None  # today's view without the claim
    inv = tree.walk(claims("usb-1-3"))
    # It leaves the slice (rules: usb.held-by-program), its interface does not
    # publish, and the claim keeps the usbfs node.
    assert [d.name for d in inv.devices] == []
    assert inv.lookup("usb-1-3") == (usbfs(5),)
    assert inv.lookup("usb-1-3-1-0") is None
    assert reason(inv, "1-3") == Reason.HELD_BY_CLAIM
    assert reason(inv, "1-3:1.0") == Reason.HELD_BY_CLAIM


def test_a_whole_device_claim_keeps_its_shape_when_a_kernel_driver_binds(tree: Tree) -> None:
    dev = tree.b.usb_device("1-3", devnum=5)
    iface = tree.b.usb_interface(dev, "1.0", driver="usbhid", cls=3)
    tree.b.node(iface, "hidraw", "hidraw3", 242, 3, subdir="hidraw")
    assert [d.name for d in tree.walk().devices] == ["usb-1-3-1-0"]
    inv = tree.walk(claims("usb-1-3"))
    assert [d.name for d in inv.devices] == []
    assert inv.lookup("usb-1-3") == (usbfs(5),)


def test_an_attached_serial_lines_adapter_keeps_no_usbfs_node(tree: Tree) -> None:
    """rules: serial.no-usbfs, usb.machine-depends. A spec.serio adapter never
    delivers its usbfs node, by any path, a claim that keeps its shape included."""
    dev = tree.b.usb_device("1-5", devnum=6, vendor="2548", product="1002")
    tree.b.usb_interface(dev, "1.0", driver=None, cls=2)
    ctx = Context(machine=MachineSpec(serio=(SerioEntry("pulse8-cec", "2548", "1002"),)))
    inv = tree.walk(claims("usb-1-5-1-0-cec", "usb-1-5-1-0-input"), ctx)
    assert [d.name for d in inv.devices] == []
    assert not inv.lookup("usb-1-5-1-0-cec")
    assert not inv.lookup("usb-1-5-1-0-input")


# -- for any generated machine and any claims ------------------------------------------------

def machine_depends_on(snap: Snapshot, ctx: Context, usb: SysDevice) -> bool:
    """The test's own statement of the rule (rules: usb.machine-depends, serial.no-usbfs): an
    interface's subtree holds the console or a block device backing a role (any block
    device while the facts are unreadable), or a spec.serio entry names the device."""
    if any(usb_ids(usb) == (e.vendor, e.product) for e in ctx.machine.serio):
        return True
    roles = ctx.facts.role_partitions
    for x in snap.devices.values():
        rest = x.path[len(usb.path) + 1:] if x.path.startswith(usb.path + "/") else ""
        if not rest or ":" not in rest.split("/")[0] or x.node is None:
            continue
        if x.node.name in snap.console:
            return True
        if x.node.type == "b" and (roles is None or x.node.name in roles):
            return True
    return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines(), st.data())
def test_claims_change_no_invariant(machine: tuple[Snapshot, Context],
                                    data: st.DataObject) -> None:
    """Whatever the claims, every security invariant holds; a device kept for its claim is
    never also in the slice and keeps exactly its own usbfs node, never one of a device the
    machine depends on."""
    snap, ctx = machine
    usb = [d for d in snap.devices.values() if d.subsystem == "usb"]
    names = sorted({device_name("usb", d.name, s) for d in usb for s in ("", "-cec", "-input")}
                   | {d.name for d in build_inventory(snap, ctx).devices})
    claimed = Claimed(frozenset(data.draw(st.lists(st.sampled_from(names), max_size=6))
                                if names else ()))
    inv = build_inventory(snap, ctx, claimed=claimed)
    check_invariants(snap, ctx, inv)
    published = {d.name for d in inv.devices}
    for name, nodes in inv.held.items():
        assert name not in published, f"{name} is both held and published"
        (node,) = nodes
        (owner,) = [d for d in usb if d.node == node]
        assert owner.devtype == "usb_device"
        assert not machine_depends_on(snap, ctx, owner), f"{name} keeps {node.path}"
