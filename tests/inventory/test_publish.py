"""What a node publishes, for one piece of hardware (inventory/publish.py): a bound driver, nodes
a claim receives, no disk the machine depends on; then the nodes no claim receives (framebuffers,
usbfs on a shared render half), usbfs alone keeping nothing, and the walk stopping at a
Bluetooth subtree.

rules: hardware.driver-bound, hardware.has-nodes, hardware.storage-role, sharing.framebuffers
rules: sharing.usb-render-no-usbfs, usb.usbfs-alone, bluetooth.walk-stops

Trees are built on disk with the builder and read through the real sysfs reader.
"""

from __future__ import annotations

from liken_devices.inventory.model import Reason
from tests.support.sysfs_builder import SysfsBuilder

from .support import Scan, bluetooth, dev, hid_interface, names, paths, reason


def test_condition1_no_driver_goes_to_unclaimed(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes, 1: hardware with no driver supplies nothing; it is unclaimed."""
    b.pci("0000:00:1f.3", vendor="8086", device="51c8", cls=0x040300)
    inv = scan()
    assert names(inv) == []
    assert reason(inv, "0000:00:1f.3") == Reason.NO_DRIVER
    assert [u.address for u in inv.unclaimed] == ["0000:00:1f.3"]


def test_condition2_no_device_node_never_appears(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes, 2: a network card is hardware with nothing to give a pod."""
    nic = b.pci("0000:02:00.0", driver="e1000e", cls=0x020000)
    b.device(nic, "eth0", "net", {"INTERFACE": "eth0"}, subdir="net")
    inv = scan()
    assert names(inv) == []
    assert reason(inv, "0000:02:00.0") == Reason.NETWORK_CARD


def test_condition3_disk_backing_a_storage_role_is_never_published(b: SysfsBuilder,
                                                                     scan: Scan) -> None:
    """What a node publishes, 3: a disk belongs to the machine or to a claim, never both."""
    nvme = b.pci("0000:3d:00.0", driver="nvme", cls=0x010802)
    ctrl = b.node(nvme, "nvme", "nvme0", 240, 0, subdir="nvme")
    disk = b.node(ctrl, "block", "nvme0n1", 259, 0, block=True)
    b.node(disk, "block", "nvme0n1p3", 259, 3, block=True)
    inv = scan(roles=frozenset({"nvme0n1p3"}))
    assert names(inv) == []
    assert reason(inv, "0000:3d:00.0") == Reason.STORAGE_ROLE
    # A spare disk (no role on it) is offered.
    assert names(scan(roles=frozenset({"sda1"}))) == ["pci-0000-3d-00-0"]


def test_condition3_unreadable_facts_offer_no_disk_but_keep_the_gpu(b: SysfsBuilder,
                                                                      scan: Scan) -> None:
    """What a node publishes, 3: without facts no disk at all; a GPU has no disk and stays."""
    sata = b.pci("0000:00:17.0", driver="ahci", cls=0x010601)
    b.node(sata, "block", "sda", 8, 0, block=True, subdir="ata1/host0/target0:0:0/0:0:0:0/block")
    b.gpu()
    inv = scan(roles=None)
    assert reason(inv, "0000:00:17.0") == Reason.FACTS_UNREADABLE
    assert names(inv) == ["pci-0000-00-02-0", "pci-0000-00-02-0-display"]
    assert not inv.facts.readable


def test_framebuffer_only_device_is_withheld(b: SysfsBuilder, scan: Scan) -> None:
    """Sharing: no workload claims a bare framebuffer."""
    vga = b.pci("0000:00:01.0", driver="bochs-drm-fb", cls=0x030000)
    b.node(vga, "graphics", "fb0", 29, 0, subdir="graphics")
    inv = scan()
    assert names(inv) == []
    assert reason(inv, "0000:00:01.0") == Reason.ONLY_WITHHELD


def test_usb_gpu_shared_render_half_carries_no_usbfs(b: SysfsBuilder, scan: Scan) -> None:
    """rules: sharing.usb-render-no-usbfs. usbfs gives control
    of the whole device, which no shared claim may have; the exclusive display half carries it."""
    usb = b.usb_device("3-1", busnum=3, devnum=4, vendor="1d5c", product="2000")
    iface = b.usb_interface(usb, "1.0", driver="gud", cls=0xFF)
    b.node(iface, "drm", "card1", 226, 1, devname="dri/card1", subdir="drm")
    b.node(iface, "drm", "renderD129", 226, 129, devname="dri/renderD129", subdir="drm")
    inv = scan()
    assert names(inv) == ["usb-3-1-1-0", "usb-3-1-1-0-display"]
    render = dev(inv, "usb-3-1-1-0")
    assert render.shareable
    assert paths(inv, "usb-3-1-1-0") == ["/dev/dri/renderD129"]
    display = dev(inv, "usb-3-1-1-0-display")
    assert not display.shareable
    assert paths(inv, "usb-3-1-1-0-display") == ["/dev/dri/card1", "/dev/bus/usb/003/004"]
    # Property: no shareable device of any shape delivers a usbfs node (major 189).
    assert not [n for d in inv.devices if d.shareable for n in d.nodes if n.major == 189]


def test_usbfs_alone_never_keeps_an_interface_in_the_slice(b: SysfsBuilder, scan: Scan) -> None:
    """rules: usb.usbfs-alone. The usbfs node belongs to the USB device, not to the interface."""
    usb = b.usb_device("1-2")
    hid_interface(b, usb, "1.0", 0)
    b.usb_interface(usb, "1.1", driver="usbhid", cls=3)  # bound, but no node of its own
    inv = scan()
    assert names(inv) == ["usb-1-2-1-0"]
    assert reason(inv, "1-2:1.1") == Reason.NO_NODE


def test_bluetooth_walk_stops_at_the_bluetooth_subtree(b: SysfsBuilder, scan: Scan) -> None:
    """Bluetooth adapters: a connected peripheral's hidraw node is not the adapter's."""
    bluetooth(b)
    inv = scan()
    assert all(n.name != "hidraw3" for d in inv.devices for n in d.nodes)

